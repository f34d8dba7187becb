package mailroomverify

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Main is the command line, with the C++ `verify` tool's arguments, keys and exit codes:
//
//	MAILROOM_SECRET_KEY=… [MAILROOM_VERIFY_KEYS=…] mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]
//
// It prints "valid" and returns 0, prints "invalid: reason" on stderr and returns 1, or
// returns 2 for a usage or configuration error. getenv reads the environment.
func Main(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	usage := func(why string) int {
		fmt.Fprintf(stderr, "mailroom-verify: %s\nusage: mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]\n"+
			"  NAME: activation, password_recovery, login_code, email_change, invitation or an action of the "+
			"application's own ([a-z][a-z0-9_]{0,62})\n", why)
		return 2
	}
	flags := map[string]string{}
	for _, arg := range args {
		name, value, found := strings.Cut(arg, "=")
		if !found || (name != "--action" && name != "--token" && name != "--code") {
			return usage("unknown argument " + name)
		}
		flags[name] = value
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
