package mailroomverify

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

const usageText = "usage: mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]\n" +
	"       mailroom-verify --well-formed --action=NAME --token=TOKEN|-\n" +
	"  NAME: activation, password_recovery, login_code, email_change, invitation or an action of the " +
	"application's own ([a-z][a-z0-9_]{0,62}); each flag as --flag=value or --flag value\n"

// parseArgs reads --action, --token and --code (as --flag=value or --flag value),
// --well-formed and --help. Errors name the flag, never a value.
func parseArgs(args []string) (flags map[string]string, wellFormed, help bool, err error) {
	flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := strings.Cut(arg, "=")
		switch {
		case arg == "--help" || arg == "-h":
			help = true
		case name == "--well-formed":
			if hasValue && value != "true" && value != "false" {
				return nil, false, false, errors.New("--well-formed: not a valid boolean")
			}
			wellFormed = !hasValue || value == "true"
		case name != "--action" && name != "--token" && name != "--code":
			if strings.HasPrefix(name, "-") {
				return nil, false, false, errors.New("unknown argument " + name)
			}
			return nil, false, false, errors.New("unexpected argument")
		case hasValue:
			flags[name] = value
		case i+1 < len(args):
			i++
			flags[name] = args[i]
		default:
			return nil, false, false, errors.New(name + " needs a value")
		}
	}
	return flags, wellFormed, help, nil
}

// Main is the command line, with the C++ `verify` tool's arguments, keys and exit codes:
//
//	MAILROOM_SECRET_KEY=… [MAILROOM_VERIFY_KEYS=…] mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]
//	mailroom-verify --well-formed --action=NAME --token=TOKEN|-
//
// Every flag as --flag=value or --flag value. It prints "valid" (with --well-formed:
// "well-formed") and returns 0, prints "invalid: reason" (or "malformed: reason") on stderr
// and returns 1, or returns 2 for a usage or configuration error. getenv reads the environment.
func Main(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	usage := func(why string) int {
		fmt.Fprintf(stderr, "mailroom-verify: %s\n%s", why, usageText)
		return 2
	}
	flags, checkSpelling, help, err := parseArgs(args)
	if err != nil {
		return usage(err.Error())
	}
	if help {
		fmt.Fprint(stdout, usageText)
		return 0
	}
	action := flags["--action"]
	if _, err := ActionFor(action); err != nil {
		return usage("--action must name an action ([a-z][a-z0-9_]{0,62})")
	}
	token, ok := flags["--token"]
	if !ok {
		return usage("--token is required")
	}
	if token == "-" { // one line; only its end goes
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		token = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	}
	if checkSpelling { // the spelling only: no key, no code, no signature
		if !WellFormed(token, action) {
			fmt.Fprintln(stderr, "malformed: token is not the unpadded base64url of 64 bytes")
			return 1
		}
		fmt.Fprintln(stdout, "well-formed")
		return 0
	}
	if getenv("MAILROOM_SECRET_KEY") == "" {
		fmt.Fprintln(stderr, "mailroom-verify: MAILROOM_SECRET_KEY: required but not set")
		return 2
	}
	keys, err := ParseKeys(getenv("MAILROOM_SECRET_KEY"), getenv("MAILROOM_VERIFY_KEYS"))
	if err != nil {
		fmt.Fprintf(stderr, "mailroom-verify: %v\n", err)
		return 2
	}
	if _, err := Verify(token, action, keys, flags["--code"]); err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrMismatch) {
			fmt.Fprintf(stderr, "mailroom-verify: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "invalid: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "valid")
	return 0
}
