// Package mailroomverify verifies mailroom's account-email tokens with Go's standard library
// only (crypto/hmac, crypto/sha256, crypto/subtle).
//
// A token is base64url_without_padding(secret[32] ‖ HMAC-SHA256(key, msg)), 86 characters,
// where msg is the action's domain string, the secret and, for actions that sign one, the
// 5-digit code: "/activate" ‖ secret for activation, "/recover" ‖ secret ‖ code for
// password_recovery.
//
//	keys, err := mailroomverify.ParseKeys(os.Getenv("MAILROOM_SECRET_KEY"), os.Getenv("MAILROOM_VERIFY_KEYS"))
//	secret, err := mailroomverify.Verify(token, "password_recovery", keys, code)
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
// the code follows it.
type Action struct {
	Domain    string
	SignsCode bool
}

// Actions maps the action names used on the wire and on the command line to what they sign. A
// new action is an entry here.
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
	// ErrUnknownAction: the action is not in Actions (a caller's mistake, not a bad token).
	ErrUnknownAction = errors.New("unknown action")
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

// decode returns the 64 bytes of the signer's one spelling: 86 base64url characters, no
// padding or whitespace, the last character's 4 unused low bits zero. base64.RawURLEncoding
// alone skips '\r' and '\n' and ignores those bits (16 strings would verify for one token):
// Strict mode refuses unused bits, and the loop refuses any other byte.
func decode(token string) ([]byte, error) {
	malformed := fmt.Errorf("%w: token is not the unpadded base64url of 64 bytes", ErrMalformed)
	if len(token) != TokenChars {
		return nil, malformed
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, malformed
		}
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) != 64 {
		return nil, malformed
	}
	return raw, nil
}

func isCode(code string) bool {
	if len(code) != 5 {
		return false
	}
	for i := 0; i < len(code); i++ {
		if code[i] < '0' || code[i] > '9' {
			return false
		}
	}
	return true
}

// Verify returns the token's 32-byte secret when one of keys (32 bytes each) signed it for
// action (and, for password_recovery, code). Every key is tried and compared with
// subtle.ConstantTimeCompare, so timing reveals neither the match nor its position. Errors wrap
// ErrMalformed or ErrMismatch (the token does not verify) or ErrUnknownAction; they never
// contain the token.
func Verify(token, action string, keys [][]byte, code string) ([]byte, error) {
	a, ok := Actions[action]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownAction, action)
	}
	raw, err := decode(token)
	if err != nil {
		return nil, err
	}
	if a.SignsCode && !isCode(code) {
		return nil, fmt.Errorf("%w: recovery code must be exactly 5 ASCII digits", ErrMalformed)
	}
	if len(keys) == 0 {
		return nil, errors.New("no verification key")
	}
	secret, mac := raw[:32], raw[32:]
	msg := append([]byte(a.Domain), secret...)
	if a.SignsCode {
		msg = append(msg, code...)
	}
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
