package mailroomverify

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The shared known-answer cases: ../testdata/vectors.json, or the file MAILROOM_VECTORS names.
type vectorCase struct {
	Name    string   `json:"name"`
	Action  string   `json:"action"`
	Keys    []string `json:"keys"`
	Token   string   `json:"token"`
	Code    *string  `json:"code"`
	Valid   bool     `json:"valid"`
	Secret  string   `json:"secret"`
	Refusal string   `json:"refusal"`
	// WellFormed is a pointer so that a file without the field fails the test, not passes it.
	WellFormed *bool `json:"well_formed"`
}

const specKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

// The shared file: its cases and the names every verifier refuses as an action's.
type vectorsDoc struct {
	Cases        []vectorCase `json:"cases"`
	InvalidNames []string     `json:"invalid_action_names"`
}

func loadDoc(t *testing.T) vectorsDoc {
	t.Helper()
	path := os.Getenv("MAILROOM_VECTORS")
	if path == "" {
		path = filepath.Join("..", "testdata", "vectors.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc vectorsDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func loadCases(t *testing.T) []vectorCase {
	t.Helper()
	cases := loadDoc(t).Cases
	if len(cases) < 50 {
		t.Fatalf("%d cases, want at least 50", len(cases))
	}
	return cases
}

func loadInvalidNames(t *testing.T) []string {
	t.Helper()
	names := loadDoc(t).InvalidNames
	if len(names) < 10 {
		t.Fatalf("%d invalid action names, want at least 10", len(names))
	}
	return names
}

func (c vectorCase) code() string {
	if c.Code == nil {
		return ""
	}
	return *c.Code
}

func TestVerifyAgreesWithEveryCase(t *testing.T) {
	for _, c := range loadCases(t) {
		var keys [][]byte
		for _, k := range c.Keys {
			b, _ := hex.DecodeString(k)
			keys = append(keys, b)
		}
		secret, err := Verify(c.Token, c.Action, keys, c.code())
		switch {
		case c.Valid && (err != nil || hex.EncodeToString(secret) != c.Secret):
			t.Errorf("%s: got %x, %v; want valid, secret %s", c.Name, secret, err, c.Secret)
		case !c.Valid && c.Refusal == "malformed" && !errors.Is(err, ErrMalformed):
			t.Errorf("%s: got %v; want malformed", c.Name, err)
		case !c.Valid && c.Refusal == "mismatch" && !errors.Is(err, ErrMismatch):
			t.Errorf("%s: got %v; want mismatch", c.Name, err)
		case err != nil && c.Token != "" && strings.Contains(err.Error(), c.Token):
			t.Errorf("%s: the error holds the token", c.Name)
		}
	}
}

func runMain(args []string, env map[string]string, stdin string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := Main(args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return rc, out.String(), errOut.String()
}

func TestCommandLineAgreesWithEveryCase(t *testing.T) {
	for _, c := range loadCases(t) {
		args := []string{"--action=" + c.Action, "--token=" + c.Token}
		if c.Code != nil {
			args = append(args, "--code="+*c.Code)
		}
		env := map[string]string{"MAILROOM_SECRET_KEY": c.Keys[0], "MAILROOM_VERIFY_KEYS": strings.Join(c.Keys[1:], ",")}
		rc, out, errOut := runMain(args, env, "")
		if c.Valid && (rc != 0 || out != "valid\n") {
			t.Errorf("%s: exit %d, %q %q; want 0, valid", c.Name, rc, out, errOut)
		}
		if !c.Valid && (rc != 1 || !strings.HasPrefix(errOut, "invalid: ")) {
			t.Errorf("%s: exit %d, %q; want 1, invalid: …", c.Name, rc, errOut)
		}
		if len(c.Token) >= 8 && strings.Contains(out+errOut, c.Token) {
			t.Errorf("%s: the token was printed", c.Name)
		}
	}
}

func TestUsageAndConfigurationErrorsExit2NamingWhatIsWrong(t *testing.T) {
	act := loadCases(t)[0].Token
	key := map[string]string{"MAILROOM_SECRET_KEY": specKey}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		says string
	}{
		{[]string{"--action=Email-Change", "--token=x"}, key, "--action"},
		{[]string{"--action=activation"}, key, "--token"},
		{[]string{"--action=activation", "--tokn=" + act}, key, "--tokn"},
		{[]string{"--action=activation", "--token=x"}, map[string]string{}, "MAILROOM_SECRET_KEY"},
		{[]string{"--action=activation", "--token=x"}, map[string]string{"MAILROOM_SECRET_KEY": "abc"}, "MAILROOM_SECRET_KEY"},
		{[]string{"--action=activation", "--token=x"}, map[string]string{"MAILROOM_SECRET_KEY": specKey, "MAILROOM_VERIFY_KEYS": specKey + ",xyz"}, "MAILROOM_VERIFY_KEYS key 2"},
	} {
		rc, _, errOut := runMain(tc.args, tc.env, "")
		if rc != 2 || !strings.Contains(errOut, tc.says) || strings.Contains(errOut, act) || strings.Contains(errOut, specKey) {
			t.Errorf("%v: exit %d, %q; want 2 naming %s", tc.args, rc, errOut, tc.says)
		}
	}
	if rc, _, errOut := runMain([]string{"--action=activation", "--token=-"}, key, act+"\r\n"); rc != 0 {
		t.Errorf("token from stdin: exit %d, %q", rc, errOut)
	}
}

func TestARealProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mailroom-verify")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/mailroom-verify").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	act := loadCases(t)[0].Token
	for token, want := range map[string]int{act: 0, act[:85] + "R": 1, "": 1} {
		cmd := exec.Command(bin, "--action=activation", "--token="+token)
		cmd.Env = []string{"MAILROOM_SECRET_KEY=" + specKey}
		err := cmd.Run()
		rc := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			rc = exitErr.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if rc != want {
			t.Errorf("token of %d characters: exit %d, want %d", len(token), rc, want)
		}
	}
}

func TestParseKeys(t *testing.T) {
	keys, err := ParseKeys(specKey, " "+strings.Repeat("ab", 32)+" , ,")
	if err != nil || len(keys) != 2 || hex.EncodeToString(keys[0]) != specKey {
		t.Fatalf("got %x, %v", keys, err)
	}
	var keyErr *KeyError
	if _, err := ParseKeys(strings.Repeat("0g", 32), ""); !errors.As(err, &keyErr) {
		t.Errorf("non-hex key: %v", err)
	}
}

func TestANameThatIsNotAnActionsIsNotAnInvalidToken(t *testing.T) {
	keys, _ := ParseKeys(specKey, "")
	token := loadCases(t)[0].Token
	for _, name := range loadInvalidNames(t) {
		_, err := Verify(token, name, keys, "")
		if !errors.Is(err, ErrUnknownAction) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrMismatch) {
			t.Errorf("%q: got %v", name, err)
		}
		var out, errOut bytes.Buffer
		env := func(string) string { return specKey }
		if rc := Main([]string{"--action=" + name, "--token=" + token}, env, strings.NewReader(""), &out, &errOut); rc != 2 ||
			!strings.Contains(errOut.String(), "--action") {
			t.Errorf("%q: exit %d, %s", name, rc, errOut.String())
		}
	}
}

func TestEveryActionHasItsDomainAndTheCasesCoverEveryActionByName(t *testing.T) {
	for name, domain := range map[string]string{
		"activation": "/activate", "password_recovery": "/recover",
		"login_code": "/action/login_code/", "team_invite": "/action/team_invite/",
	} {
		if a, err := ActionFor(name); err != nil || a.Domain != domain {
			t.Errorf("%s: %v %v", name, a, err)
		}
	}
	seen := map[string]bool{}
	for _, c := range loadCases(t) {
		seen[c.Action] = true
	}
	for _, name := range []string{"activation", "password_recovery", "login_code", "email_change",
		"invitation", "welcome_gift", "team_invite"} {
		if !seen[name] {
			t.Errorf("no case for %s", name)
		}
	}
}

func TestWellFormedAgreesWithEveryCase(t *testing.T) {
	counts := map[bool]int{}
	for _, c := range loadCases(t) {
		if c.WellFormed == nil {
			t.Fatalf("%s: no well_formed", c.Name)
		}
		if got := WellFormed(c.Token, c.Action); got != *c.WellFormed {
			t.Errorf("%s: WellFormed = %v, want %v", c.Name, got, *c.WellFormed)
		}
		counts[*c.WellFormed]++
		if c.Action == "password_recovery" && c.Code == nil && *c.WellFormed {
			// Without its code a recovery token does not verify, but it is well formed.
			key, _ := hex.DecodeString(c.Keys[0])
			if _, err := Verify(c.Token, c.Action, [][]byte{key}, ""); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: Verify without the code: %v", c.Name, err)
			}
		}
	}
	if counts[true] == 0 || counts[false] == 0 {
		t.Errorf("cases: %v", counts)
	}
}

func TestWellFormedPanicsForANameThatIsNotAnActions(t *testing.T) {
	for _, name := range loadInvalidNames(t) {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, ErrUnknownAction) {
					t.Errorf("%q: recovered %v, want ErrUnknownAction", name, err)
				}
			}()
			WellFormed(loadCases(t)[0].Token, name)
		}()
	}
}

func TestCommandLineWellFormedAgreesWithEveryCaseInBothForms(t *testing.T) {
	for _, c := range loadCases(t) {
		for _, args := range [][]string{
			{"--well-formed", "--action=" + c.Action, "--token=" + c.Token},
			{"--action", c.Action, "--well-formed", "--token", c.Token},
		} {
			rc, out, errOut := runMain(args, map[string]string{}, "")
			if *c.WellFormed && (rc != 0 || out != "well-formed\n") {
				t.Errorf("%s %v: exit %d, %q %q", c.Name, args[:2], rc, out, errOut)
			}
			if !*c.WellFormed && (rc != 1 || !strings.HasPrefix(errOut, "malformed: ")) {
				t.Errorf("%s %v: exit %d, %q", c.Name, args[:2], rc, errOut)
			}
			if len(c.Token) >= 8 && strings.Contains(out+errOut, c.Token) {
				t.Errorf("%s: token printed", c.Name)
			}
		}
	}
	for _, name := range loadInvalidNames(t) {
		if rc, _, _ := runMain([]string{"--well-formed", "--action", name, "--token", "x"}, map[string]string{}, ""); rc != 2 {
			t.Errorf("%q: exit %d, want 2", name, rc)
		}
	}
}

func TestEveryFlagAsTheNextWord(t *testing.T) {
	for _, c := range loadCases(t) {
		args := []string{"--action", c.Action, "--token", c.Token}
		if c.Code != nil {
			args = append(args, "--code", *c.Code)
		}
		env := map[string]string{"MAILROOM_SECRET_KEY": c.Keys[0], "MAILROOM_VERIFY_KEYS": strings.Join(c.Keys[1:], ",")}
		want := 1
		if c.Valid {
			want = 0
		}
		if rc, _, errOut := runMain(args, env, ""); rc != want {
			t.Errorf("%s: exit %d, want %d: %s", c.Name, rc, want, errOut)
		}
	}
	key := map[string]string{"MAILROOM_SECRET_KEY": specKey}
	for _, args := range [][]string{{"--action=activation", "--token"}, {"--action"}, {"--action=activation", "--token=x", "extra"}, {"--well-formed=maybe"}} {
		if rc, _, errOut := runMain(args, key, ""); rc != 2 || strings.Contains(errOut, "extra") {
			t.Errorf("%v: exit %d, %q", args, rc, errOut)
		}
	}
	if rc, _, _ := runMain([]string{"--help"}, key, ""); rc != 0 {
		t.Errorf("--help: exit %d", rc)
	}
}
