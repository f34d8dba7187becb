#!/usr/bin/env bash
# The verify tool against SPEC.md's known-answer vectors, across a key rotation.
set -u
verify=collector/verify
key=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
other=ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff
act=PKJDxp4dwNHwMRN5Eg3LgKJ3tkodNYjPFelQegLiHtRvzbQpO1pD6At0uvhgfW5xFZxZqXWUac52g65ko1kY3Q
rec=LqIZz5Y7xVZ4sVskfZPlnVYAxxpmEmvZUb3Ybr8iniULPg4NZs3Mbl9-42HCOCfjTMapULm8JSIYLhaVylgjAg
# Other actions sign "/action/" || name || "/" || secret (|| code): secret bytes 0x40..0x5f,
# login_code with code 123456, document_signature (an application's own) without a code.
login=QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9RZvSiPGR2m1ZQBC3h70EksY6swSwCku38SajrsKq9kw
custom=QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl-x8xKl7OQOfBMzOMHyLh_6ZcsXT_jvnKlakb2-qrT_ZQ
fail=0
expect() {  # expect CODE -- command...
  local want=$1; shift
  "$@" >/tmp/verify_out.$$ 2>&1; local got=$?
  if [ "$got" != "$want" ]; then echo "FAIL ($got != $want): $*"; cat /tmp/verify_out.$$; fail=1; fi
  if grep -q "$act\|$rec\|$login\|$custom" /tmp/verify_out.$$; then echo "FAIL: token echoed: $*"; fail=1; fi
}
expect 0 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token=$act
expect 0 env MAILROOM_SECRET_KEY=$key $verify --action=password_recovery --token=$rec --code=42565
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=password_recovery --token=$rec --code=42566
expect 1 env MAILROOM_SECRET_KEY=$other $verify --action=activation --token=$act
# Rotation: signed with the old key, verified with the new one current and the old one kept.
expect 0 env MAILROOM_SECRET_KEY=$other MAILROOM_VERIFY_KEYS=$key $verify --action=activation --token=$act
echo "$act" > /tmp/verify_in.$$
expect 0 sh -c "MAILROOM_SECRET_KEY=$key $verify --action=activation --token=- < /tmp/verify_in.$$"
printf '%s\r\n' "$act" > /tmp/verify_in.$$
expect 0 sh -c "MAILROOM_SECRET_KEY=$key $verify --action=activation --token=- < /tmp/verify_in.$$"
# One spelling per token: the same 64 bytes with the last character's unused bits set, with
# padding, or with spaces around it are refused.
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token="${act%Q}R"
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token="$act=="
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token=" $act"
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token=
expect 2 env MAILROOM_SECRET_KEY=$key $verify --action=activation
expect 2 env MAILROOM_SECRET_KEY=$key $verify --action=activation --tokn=$act
grep -qx "verify: --tokn: unknown flag" /tmp/verify_out.$$ || { echo "FAIL: unknown flag unnamed"; fail=1; }
expect 2 env MAILROOM_SECRET_KEY=$key $verify --action=activation --token=$act extra
# The value may follow its flag as the next word, as with every abseil flag.
expect 0 env MAILROOM_SECRET_KEY=$key $verify --action activation --token $act
expect 0 $verify --help
grep -q "^  --token=  the token" /tmp/verify_out.$$ || { echo "FAIL: --help lists no --token"; fail=1; }
expect 2 env MAILROOM_SECRET_KEY=$key $verify --action=Bogus-Name --token=$act
expect 2 env MAILROOM_SECRET_KEY=$key $verify --action=a/b --token=$act
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=bogus --token=$act
expect 0 env MAILROOM_SECRET_KEY=$key $verify --action=login_code --token=$login --code=123456
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=login_code --token=$login --code=123457
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=login_code --token=$login
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=email_change --token=$login --code=123456
expect 0 env MAILROOM_SECRET_KEY=$key $verify --action=document_signature --token=$custom
expect 1 env MAILROOM_SECRET_KEY=$key $verify --action=document_signatur --token=$custom
expect 2 env -u MAILROOM_SECRET_KEY $verify --action=activation --token=$act
expect 2 env MAILROOM_SECRET_KEY=xyz $verify --action=activation --token=$act
rm -f /tmp/verify_out.$$ /tmp/verify_in.$$
[ $fail = 0 ] && echo "verify tool: all cases pass"
exit $fail
