#!/usr/bin/env bash
# The services' command lines: --help prints every setting of the table without reading the
# environment; unknown commands and flags exit 2 naming them, never a value.
set -u
collector=collector/collector
sender=sender/sender
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
expect() {  # expect CODE command...
  local want=$1; shift
  "$@" >"$out" 2>&1; local got=$?
  if [ "$got" != "$want" ]; then echo "FAIL ($got != $want): $*"; cat "$out"; fail=1; fi
  if grep -q "s3cret-value" "$out"; then echo "FAIL: a value was echoed: $*"; fail=1; fi
}
has() {  # has LINE: the last output holds this exact line
  grep -qxF -- "$1" "$out" || { echo "FAIL: no line \"$1\""; cat "$out"; fail=1; }
}

# --help reads no variable: a broken configuration and a secret do not matter.
expect 0 env MAILROOM_BATCH_LIMIT=ten MAILROOM_SECRET_KEY=s3cret-value $collector --help
has "MAILROOM_BATCH_LIMIT  (default: 10; 1..10000)"
has "MAILROOM_SECRET_KEY  (default: none; secret)"
has "MAILROOM_RETENTION  (default: 2592000000; 0..315360000000)"
[ "$(grep -c '^MAILROOM_' "$out")" -ge 45 ] || { echo "FAIL: collector --help is short"; fail=1; }
expect 0 env MAILROOM_SMTP_PASSWORD=s3cret-value MAILROOM_TRANSPORT=bogus $sender --help
has "MAILROOM_MAX_IN_FLIGHT  (default: 100; 1..100000)"
has "MAILROOM_FAILOVER_SMTP_PASSWORD  (default: none; secret)"
has "  --action=  sender render: the action's name (activation, password_recovery, login_code, ... or one with templates in the template directory)"
[ "$(grep -c '^\(MAILROOM\|AWS\)_' "$out")" -gt 70 ] || { echo "FAIL: sender --help is short"; fail=1; }

expect 2 $sender bogus
has "sender: unknown command bogus"
expect 2 $sender render --actoin=s3cret-value
has "sender: --actoin: unknown flag"
expect 2 $sender doctor --locale=de
has "sender: --locale is a flag of sender render"
expect 2 $sender render --action
has "sender: --action: needs a value"
expect 2 $collector bogus

[ $fail = 0 ] && echo "command lines: all cases pass"
exit $fail
