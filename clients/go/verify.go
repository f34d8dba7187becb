// Package mailroomverify verifies mailroom's account-email tokens with Go's standard library
// only (crypto/hmac, crypto/sha256, crypto/subtle).
//
// A token is base64url_without_padding(secret[32] ‖ HMAC-SHA256(key, msg)), 86 characters,
// where msg is the action's domain string, the secret and, for actions that sign one, the
// code: "/activate" ‖ secret for activation, "/recover" ‖ secret ‖ code (5 digits) for
// password_recovery, "/action/" ‖ name ‖ "/" ‖ secret (‖ code, 5 to 12 digits, when one is
// given) for every other action, built in (login_code, email_change, invitation) or the
// application's own (a name matching [a-z][a-z0-9_]{0,62}).
//
//	keys, err := mailroomverify.ParseKeys(os.Getenv("MAILROOM_SECRET_KEY"), os.Getenv("MAILROOM_VERIFY_KEYS"))
//	secret, err := mailroomverify.Verify(token, "password_recovery", keys, code)
//	secret, err := mailroomverify.Verify(token, "login_code", keys, code)
//	secret, err := mailroomverify.Verify(token, "email_change", keys, "") // signs no code
//	ok := mailroomverify.WellFormed(token, "password_recovery")           // spelling only, no key
package mailroomverify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Action is what a token authorizes: the domain string signed before the secret, and whether
// a code may follow it (always for password_recovery; for an action other than the two first,
// when one is given).
type Action struct {
	Domain    string
	SignsCode bool
}

// Actions holds the two first actions, whose domain strings and code rules are their own:
// activation signs no code (one given is ignored), password_recovery always signs a 5-digit
// one. Every other action is found by its name (ActionFor).
var Actions = map[string]Action{
	"activation":        {Domain: "/activate", SignsCode: false},
	"password_recovery": {Domain: "/recover", SignsCode: true},
}

// TokenChars is the length of every token: base64url of 64 bytes, unpadded.
const TokenChars = 86

var (
	// ErrMalformed: the token is not the signer's spelling of 64 bytes, or a recovery code is
	// not 5 ASCII digits.
	ErrMalformed = errors.New("malformed")
	// ErrMismatch: well formed, but no key signed it for this action (and code).
	ErrMismatch = errors.New("signature does not match any key")
	// ErrUnknownAction: the name is not an action's ([a-z][a-z0-9_]{0,62}): a caller's
	// mistake, not a bad token.
	ErrUnknownAction = errors.New("not an action name (want [a-z][a-z0-9_]{0,62})")
)

// KeyError is a key list that cannot be used; it names the variable, never the key.
type KeyError struct{ Where, Problem string }

func (e *KeyError) Error() string { return e.Where + ": " + e.Problem }

func parseKey(text, where string) ([]byte, error) {
	key, err := hex.DecodeString(text)
	if len(text) != 64 || err != nil {
		problem := fmt.Sprintf("must be 64 hex characters (32 bytes), got %d characters", len(text))
		if len(text) == 64 {
			problem += " with a non-hex one"
		}
		return nil, &KeyError{where, problem}
	}
	return key, nil
}

// ParseKeys returns the verification keys: current (MAILROOM_SECRET_KEY, 64 hex characters)
// first, then the comma-separated older ones (MAILROOM_VERIFY_KEYS). Errors are *KeyError.
func ParseKeys(current, older string) ([][]byte, error) {
	key, err := parseKey(current, "MAILROOM_SECRET_KEY")
	if err != nil {
		return nil, err
	}
	keys := [][]byte{key}
	for i, part := range strings.Split(older, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		key, err := parseKey(part, fmt.Sprintf("MAILROOM_VERIFY_KEYS key %d", i+1))
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// spelledRight: the signer's one spelling, 86 base64url characters, no padding or whitespace,
// the last character's 4 unused low bits zero (otherwise 16 strings would verify for one token).
func spelledRight(token string) bool {
	if len(token) != TokenChars {
		return false
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	last := token[TokenChars-1]
	return strings.IndexByte(alphabet, last)&0x0f == 0
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// WellFormed reports whether token has the signer's one spelling (86 base64url characters, no
// padding, the last character's 4 unused bits zero) and action is an action's name. It checks
// no signature and needs no key or code: what a front end checks on a recovery link's GET,
// before the user has typed the code (Verify refuses a recovery token without its code as
// malformed). A name that is not an action's is a caller's mistake, not a malformed token:
// WellFormed panics with an error wrapping ErrUnknownAction (as the other verifiers throw);
// check a name that is not a constant with ActionFor first.
func WellFormed(token, action string) bool {
	if _, err := ActionFor(action); err != nil {
		panic(fmt.Errorf("mailroomverify.WellFormed: %w", err))
	}
	return spelledRight(token)
}

// decode returns the 64 bytes of a token of the signer's spelling. base64.RawURLEncoding
// alone skips '\r' and '\n' and ignores the last character's unused bits: spelledRight
// refuses both, and Strict mode as well.
func decode(token string) ([]byte, error) {
	malformed := fmt.Errorf("%w: token is not the unpadded base64url of 64 bytes", ErrMalformed)
	if !spelledRight(token) {
		return nil, malformed
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) != 64 {
		return nil, malformed
	}
	return raw, nil
}

// isDigits: between min and max ASCII digits (not other scripts' digits).
func isDigits(code string, min, max int) bool {
	if len(code) < min || len(code) > max {
		return false
	}
	for i := 0; i < len(code); i++ {
		if code[i] < '0' || code[i] > '9' {
			return false
		}
	}
	return true
}

func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ActionFor returns what a token of the named action signs: the entry of Actions, or for any
// other name "/action/" + name + "/" with the code signed when one is given. The error wraps
// ErrUnknownAction for a name that is not an action's.
func ActionFor(name string) (Action, error) {
	if a, ok := Actions[name]; ok {
		return a, nil
	}
	if !validName(name) {
		return Action{}, ErrUnknownAction
	}
	return Action{Domain: "/action/" + name + "/", SignsCode: true}, nil
}

// signedCode is the code a token of the action signs ("" for none), or an ErrMalformed error.
func signedCode(name string, a Action, code string) (string, error) {
	switch {
	case !a.SignsCode:
		return "", nil // activation: one given is ignored
	case name == "password_recovery":
		if !isDigits(code, 5, 5) {
			return "", fmt.Errorf("%w: recovery code must be exactly 5 ASCII digits", ErrMalformed)
		}
	case code == "":
		return "", nil // an action that carries no code, or none given
	case !isDigits(code, 5, 12):
		return "", fmt.Errorf("%w: code must be 5 to 12 ASCII digits", ErrMalformed)
	}
	return code, nil
}

// Verify returns the token's 32-byte secret when one of keys (32 bytes each) signed it for
// action (and code, for an action that carries one: password_recovery always, any other but
// activation when code is not ""). Every key is tried and compared with
// subtle.ConstantTimeCompare, so timing reveals neither the match nor its position. Errors wrap
// ErrMalformed or ErrMismatch (the token does not verify) or ErrUnknownAction; they never
// contain the token.
func Verify(token, action string, keys [][]byte, code string) ([]byte, error) {
	a, err := ActionFor(action)
	if err != nil {
		return nil, err
	}
	raw, err := decode(token)
	if err != nil {
		return nil, err
	}
	signed, err := signedCode(action, a, code)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no verification key")
	}
	secret, mac := raw[:32], raw[32:]
	msg := append(append([]byte(a.Domain), secret...), signed...)
	match := 0
	for _, key := range keys {
		if len(key) != 32 {
			return nil, errors.New("every key must be 32 bytes")
		}
		h := hmac.New(sha256.New, key)
		h.Write(msg)
		match |= subtle.ConstantTimeCompare(h.Sum(nil), mac)
	}
	if match == 0 {
		return nil, ErrMismatch
	}
	return secret, nil
}
