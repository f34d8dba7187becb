"""Verifies mailroom's account-email tokens with Python's standard library only.

A token is base64url_without_padding(secret[32] || HMAC-SHA256(key, msg)), 86 characters,
where msg is the action's domain string, the secret and, for actions that sign one, the code:
"/activate" || secret for activation, "/recover" || secret || code (5 digits) for
password_recovery, and "/action/" || name || "/" || secret || code for every other action, built
in (login_code, email_change, invitation) or the application's own (any name matching
[a-z][a-z0-9_]{0,62}), the code (5 to 12 digits) appended only when one is given.

    keys = parse_keys(os.environ["MAILROOM_SECRET_KEY"], os.environ.get("MAILROOM_VERIFY_KEYS"))
    secret = verify_token(token, "password_recovery", keys, code="42565")  # 32 bytes, or raises
    secret = verify_token(token, "login_code", keys, code="048213")
    secret = verify_token(token, "email_change", keys)  # no code: the action signs none
    well_formed(token, "password_recovery")  # the spelling only: a link's GET, before the code

Command line (exit 0 valid, 1 invalid, 2 usage or configuration error; each flag as
--flag=value or --flag value):

    MAILROOM_SECRET_KEY=... python3 mailroom_verify.py --action=NAME --token=TOKEN|- [--code=N]
    python3 mailroom_verify.py --well-formed --action=NAME --token=TOKEN|-
"""

import base64
import hashlib
import hmac
import os
import re
import sys

__all__ = ["ACTIONS", "InvalidToken", "KeyConfigError", "action_domain", "parse_keys",
           "verify_token", "well_formed", "main"]

# The two first actions keep their own domain strings and code rules: activation signs no code
# (one given is ignored), password_recovery always signs a 5-digit one.
ACTIONS = {
    "activation": (b"/activate", False),
    "password_recovery": (b"/recover", True),
}
_ACTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}\Z")
_OTHER_CODE = re.compile(r"[0-9]{5,12}\Z")  # ASCII only (re's [0-9], not \d)

TOKEN_CHARS = 86  # base64url of 64 bytes, unpadded
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_VALUE = {c: i for i, c in enumerate(_ALPHABET)}
_HEX = frozenset("0123456789abcdefABCDEF")


class InvalidToken(ValueError):
    """A token that does not verify. `kind` is "malformed" (not the signer's spelling of 64
    bytes, or a recovery code that is not 5 ASCII digits) or "mismatch" (no key signed it).
    The message never contains the token."""

    def __init__(self, kind, reason):
        super().__init__(reason)
        self.kind = kind


class KeyConfigError(ValueError):
    """A key list that cannot be used. The message says what is wrong, never the key."""


def parse_keys(current, older=None):
    """The verification keys: `current` (64 hex characters, MAILROOM_SECRET_KEY) first, then the
    comma-separated `older` ones (MAILROOM_VERIFY_KEYS), as 32-byte strings. Raises KeyConfigError
    naming the variable and the key's position."""
    keys = [_parse_key(current or "", "MAILROOM_SECRET_KEY")]
    for n, part in enumerate((older or "").split(","), start=1):
        if part.strip():
            keys.append(_parse_key(part.strip(), "MAILROOM_VERIFY_KEYS key %d" % n))
    return keys


def _parse_key(text, where):
    if len(text) != 64 or not _HEX.issuperset(text):
        raise KeyConfigError("%s: must be 64 hex characters (32 bytes), got %d characters%s"
                        % (where, len(text), "" if len(text) != 64 else " with a non-hex one"))
    return bytes.fromhex(text)


def _spelled_right(token):
    """The signer's one spelling: 86 base64url characters, no padding or whitespace, the last
    character's 4 unused low bits zero (otherwise 16 strings would verify for one token)."""
    return (isinstance(token, str) and len(token) == TOKEN_CHARS
            and all(c in _VALUE for c in token) and not _VALUE[token[-1]] & 0x0F)


def _decode(token):
    """The 64 bytes of a token of the signer's spelling, or raises InvalidToken (malformed)."""
    if not _spelled_right(token):
        raise InvalidToken("malformed", "token is not the unpadded base64url of 64 bytes")
    return base64.urlsafe_b64decode(token + "==")


def well_formed(token, action):
    """Whether `token` has the signer's one spelling (86 base64url characters, no padding, the
    last character's 4 unused bits zero), for an action by its name. Checks no signature and
    needs no key or code: what a front end checks on a recovery link's GET, before the user has
    typed the code (verify_token refuses a recovery token without its code as malformed).
    Raises ValueError for a name that is not an action's, like verify_token."""
    action_domain(action)
    return _spelled_right(token)


def _is_code(code):
    # str.isdigit() would take full-width and other scripts' digits: ASCII only.
    return isinstance(code, str) and len(code) == 5 and all("0" <= c <= "9" for c in code)


def action_domain(action):
    """The domain string a token of `action` signs before its secret: b"/activate",
    b"/recover", or b"/action/" + name + b"/". Raises ValueError for a name that is not an
    action's ([a-z][a-z0-9_]{0,62})."""
    if action in ACTIONS:
        return ACTIONS[action][0]
    if not isinstance(action, str) or not _ACTION_NAME.match(action):
        raise ValueError("not an action name (want [a-z][a-z0-9_]{0,62})")
    return b"/action/" + action.encode("ascii") + b"/"


def _signed_code(action, code):
    """The bytes of `code` the token of `action` signs, or raises InvalidToken (malformed)."""
    if action == "activation":
        return b""  # activation signs no code: one given is ignored
    if action == "password_recovery":
        if not _is_code(code):
            raise InvalidToken("malformed", "recovery code must be exactly 5 ASCII digits")
        return code.encode("ascii")
    if code is None or code == "":
        return b""  # an action that carries no code, or none given
    if not isinstance(code, str) or not _OTHER_CODE.match(code):
        raise InvalidToken("malformed", "code must be 5 to 12 ASCII digits")
    return code.encode("ascii")


def verify_token(token, action, keys, code=None):
    """Returns the token's 32-byte secret when one of `keys` (32-byte strings) signed it for
    `action` (and `code`, for an action that carries one: password_recovery always, any other
    action but activation when `code` is given). Every key is tried and compared in constant
    time (hmac.compare_digest), so timing reveals neither the match nor its position. Raises
    InvalidToken when the token does not verify, ValueError for a name that is not an action's
    or no key."""
    domain = action_domain(action)
    raw = _decode(token)
    signed_code = _signed_code(action, code)
    if not keys or any(len(k) != 32 for k in keys):
        raise ValueError("keys must be a non-empty list of 32-byte keys")
    secret, mac = raw[:32], raw[32:]
    msg = domain + secret + signed_code
    match = False
    for key in keys:
        match |= hmac.compare_digest(hmac.new(key, msg, hashlib.sha256).digest(), mac)
    if not match:
        raise InvalidToken("mismatch", "signature does not match any key")
    return secret


USAGE = ("usage: mailroom_verify.py --action=NAME --token=TOKEN|- [--code=DIGITS]\n"
         "       mailroom_verify.py --well-formed --action=NAME --token=TOKEN|-\n"
         "  NAME: activation, password_recovery, login_code, email_change, invitation or an "
         "action of the application's own ([a-z][a-z0-9_]{0,62}); each flag as --flag=value "
         "or --flag value")

_VALUED = ("--action", "--token", "--code")


def _parse_args(argv):
    """(flags, well_formed, help), or raises ValueError naming the flag (never a value)."""
    flags, check_spelling, want_help = {}, False, False
    words = iter(argv)
    for arg in words:
        name, eq, value = arg.partition("=")
        if arg in ("--help", "-h"):
            want_help = True
        elif name == "--well-formed":
            if eq and value not in ("true", "false"):
                raise ValueError("--well-formed: not a valid boolean")
            check_spelling = not eq or value == "true"
        elif name not in _VALUED:
            raise ValueError("unknown argument %s" % name if name.startswith("-")
                             else "unexpected argument")
        elif eq:
            flags[name] = value
        else:
            following = next(words, None)
            if following is None:
                raise ValueError("%s needs a value" % name)
            flags[name] = following
    return flags, check_spelling, want_help


def main(argv=None, env=None, stdin=None, stdout=None, stderr=None):
    """The command line: the C++ `verify` tool's arguments, keys and exit codes."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr

    def usage(why):
        print("mailroom_verify: %s\n%s" % (why, USAGE), file=stderr)
        return 2

    try:
        args, check_spelling, want_help = _parse_args(argv)
    except ValueError as e:
        return usage(str(e))
    if want_help:
        print(USAGE, file=stdout)
        return 0
    try:
        action_domain(args.get("--action"))
    except ValueError:
        return usage("--action must name an action ([a-z][a-z0-9_]{0,62})")
    if "--token" not in args:
        return usage("--token is required")
    token = args["--token"]
    if token == "-":  # one line; only its end goes
        token = stdin.readline().rstrip("\n")
        token = token[:-1] if token.endswith("\r") else token
    if check_spelling:  # the spelling only: no key, no code, no signature
        if not well_formed(token, args["--action"]):
            print("malformed: token is not the unpadded base64url of 64 bytes", file=stderr)
            return 1
        print("well-formed", file=stdout)
        return 0
    if not env.get("MAILROOM_SECRET_KEY"):
        print("mailroom_verify: MAILROOM_SECRET_KEY: required but not set", file=stderr)
        return 2
    try:
        keys = parse_keys(env["MAILROOM_SECRET_KEY"], env.get("MAILROOM_VERIFY_KEYS"))
    except KeyConfigError as e:
        print("mailroom_verify: %s" % e, file=stderr)
        return 2
    try:
        verify_token(token, args["--action"], keys, args.get("--code"))
    except InvalidToken as e:
        print("invalid: %s" % e, file=stderr)
        return 1
    print("valid", file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
