#!/usr/bin/env bash
# Runs every grpcurl command of docs/operations.md (between each pair of grpcurl-examples
# markers) exactly as written, against a real collector on a throwaway PostgreSQL. grpcurl is not packaged for
# Debian, so a `grpcurl` shell function translates its flags to `buf curl` (npm @bufbuild/buf).
set -euo pipefail
RUN=${TEST_SRCDIR:-$(pwd)/bazel-bin/integration_tests/grpcurl_test.runfiles}/mailroom
COLLECTOR=$RUN/collector/collector
README=$RUN/docs/operations.md
BUF=${MAILROOM_NODE_MODULES:-}/.bin/buf
if [ -z "${MAILROOM_NODE_MODULES:-}" ] || [ ! -x "$BUF" ]; then
  echo "FAIL: MAILROOM_NODE_MODULES must point at the npm peers (run .ci/test)"; exit 1
fi
PGBIN=/usr/lib/postgresql/15/bin
WORK=$(mktemp -d /tmp/grpcurl-test.XXXXXX)
chmod 755 "$WORK"
PID=""
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$WORK/pg"
cd "$WORK"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$WORK/pg"
PGPORT=$(free_port)
as_pg "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $WORK/pg -c fsync=off" start >/dev/null
export MAILROOM_DATABASE_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
"$COLLECTOR" migrate >/dev/null 2>&1
# A second consumer group (the README's "audit") that sees the 42 accounts created next, so
# that job 42 exists for the Requeue/Acknowledge/RenewLeases examples, and bob and ann (whose
# address bounced), whose activations FindEmails finds.
psql -q -X -v ON_ERROR_STOP=1 "$MAILROOM_DATABASE_URL" -c "SELECT mailroom.mailroom_ensure_group('audit')" \
  -c "INSERT INTO mailroom.accounts (email, login) SELECT 'g' || i || '@example.test', 'g' || i FROM generate_series(1, 42) i" \
  -c "INSERT INTO mailroom.accounts (email, login) VALUES ('bob@example.com', 'bob'), ('ann@example.com', 'ann')" \
  -c "INSERT INTO mailroom.suppressions (address, reason, source) VALUES ('ann@example.com', 'hard_bounce', 'ses bounce')" >/dev/null

PORT=$(free_port)
# The README's two tokens, scoped as the README says.
export OPERATOR_TOKEN=grpcurl-operator-token-0123456789
export SENDER_TOKEN=grpcurl-sender-token-0123456789
GROUP_OPERATOR_TOKEN=grpcurl-group-operator-token-0123456789
MAILROOM_SECRET_KEY=$(openssl rand -hex 32) \
  MAILROOM_SUBSCRIBER_TOKENS="$OPERATOR_TOKEN@*:operator,$SENDER_TOKEN@mailroom+audit:subscriber,$GROUP_OPERATOR_TOKEN@audit:operator" \
  MAILROOM_LISTEN_ADDRESS=127.0.0.1:$PORT MAILROOM_METRICS_ADDRESS=off \
  "$COLLECTOR" >"$WORK/collector.log" 2>&1 &
PID=$!
for _ in $(seq 100); do grep -q 'msg=connected' "$WORK/collector.log" && break; sleep 0.1; done

# grpcurl [-plaintext] [-H h]... [-d data] [-max-time s] ADDR (list | describe SYM | SVC/METHOD)
grpcurl() {
  local args=(--protocol grpc --http2-prior-knowledge) timeout=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -plaintext) shift ;;
      -H) args+=(-H "$2"); shift 2 ;;
      -d) args+=(-d "$2"); shift 2 ;;
      -max-time) timeout=$2; shift 2 ;;
      -*) echo "grpcurl stand-in: unsupported flag $1" >&2; return 2 ;;
      *) break ;;
    esac
  done
  local addr=${1/127.0.0.1:50051/127.0.0.1:$PORT}; shift
  [ -n "$timeout" ] && args=(--timeout "${timeout}s" "${args[@]}")
  case "$1" in
    list) "$BUF" curl "${args[@]}" --list-services "http://$addr" ;;
    describe) "$BUF" curl "${args[@]}" --list-methods "http://$addr" | grep "^$2/" ;;
    *) "$BUF" curl "${args[@]}" "http://$addr/$1" ;;
  esac
}

# The expected output of each example, by the last word of its command.
expect() {
  case "$1" in
    list) echo 'mailroom.v1.Collector' ;;
    mailroom.v1.Collector) echo 'mailroom.v1.Collector/Subscribe' ;;
    */Check) echo '"SERVING"' ;;
    */GetQueueStats) echo '"depth"' ;;
    */ListFailures) echo '^' ;;
    */Requeue) echo '^' ;;
    */GetUsage) echo '"month"' ;;
    */Subscribe) echo '"jobId": "42"' ;;
    */Acknowledge) echo '"recorded": 1' ;;
    */RenewLeases) echo '"lostJobIds"' ;;
    */AddSuppression) echo '"address": "bob@example.com"' ;;
    */ListSuppressions) echo '"address": "bob@example.com"' ;;
    */RemoveSuppression) echo '"removed"' ;;
    */FindEmails) echo '"suppressed": true' ;;
    */ListAudit) echo '"method": "FindEmails"' ;;
    */PauseGroup) echo '"reason": "provider incident"' ;;
    */ResumeGroup) echo '"consumerGroup": "audit"' ;;
    */SetGroupBudget) echo '"monthlyBudgetMicros": "100000000"' ;;
    */GetGroupBudget) echo '"recoveryReservePercent": 10' ;;
    */AcquireBudget) echo '"grantId"' ;;
    */ReturnBudget) echo '"returned": 1' ;;
    *) echo 'NO EXPECTATION' ;;
  esac
}

passed=0 failed=0
n=0
while IFS= read -r line; do
  case "$line" in grpcurl\ *) ;; *) continue ;; esac
  n=$((n + 1))
  last=${line##* }
  out=$(eval "$line" 2>&1) && rc=0 || rc=$?
  want=$(expect "$last")
  # The README's `export SUB=...`: the subscription id the Subscribe example printed.
  if [[ $last == */Subscribe ]]; then
    SUB=$(grep -o '"subscriberId": *"[^"]*"' <<<"$out" | head -n 1 | sed 's/.*: *"\(.*\)"/\1/')
    export SUB
  fi
  # The README's `export GRANT=...`: the grant AcquireBudget printed.
  if [[ $last == */AcquireBudget ]]; then
    GRANT=$(grep -o '"grantId": *"[^"]*"' <<<"$out" | head -n 1 | sed 's/.*: *"\(.*\)"/\1/')
    export GRANT
  fi
  # Subscribe is a stream cut by -max-time: its exit status reports the deadline.
  if { [ $rc = 0 ] || [[ $last == */Subscribe ]]; } && grep -q -- "$want" <<<"$out"; then
    passed=$((passed + 1)); echo "PASS $line"
  else
    failed=$((failed + 1)); echo "FAIL (exit $rc, wanted /$want/) $line"; echo "$out" | head -20
  fi
done < <(sed -n '/<!-- grpcurl-examples: begin -->/,/<!-- grpcurl-examples: end -->/p' "$README")

# And without the token, the same call is refused with UNAUTHENTICATED.
out=$(grpcurl -plaintext -d '{"consumer_group":"mailroom"}' 127.0.0.1:50051 mailroom.v1.Collector/GetQueueStats 2>&1) || true
if grep -q -i 'unauthenticated' <<<"$out"; then passed=$((passed + 1)); echo "PASS no token -> UNAUTHENTICATED"
else failed=$((failed + 1)); echo "FAIL no token: $out"; fi
# Outside their scope the tokens are refused with PERMISSION_DENIED.
denied() {
  local what=$1; shift
  out=$("$@" 2>&1) || true
  if grep -q -i 'permission_denied' <<<"$out"; then passed=$((passed + 1)); echo "PASS $what -> PERMISSION_DENIED"
  else failed=$((failed + 1)); echo "FAIL $what: $out"; fi
}
denied "sender token Requeue" grpcurl -plaintext -H "authorization: Bearer $SENDER_TOKEN" -d '{"consumer_group":"mailroom"}' 127.0.0.1:50051 mailroom.v1.Collector/Requeue
denied "sender token in another group" grpcurl -plaintext -H "authorization: Bearer $SENDER_TOKEN" -d '{"consumer_group":"billing"}' 127.0.0.1:50051 mailroom.v1.Collector/GetUsage
denied "sender token SetGroupBudget" grpcurl -plaintext -H "authorization: Bearer $SENDER_TOKEN" -d '{"consumer_group":"mailroom","burst":1}' 127.0.0.1:50051 mailroom.v1.Collector/SetGroupBudget
denied "operator token AcquireBudget" grpcurl -plaintext -H "authorization: Bearer $OPERATOR_TOKEN" -d '{"consumer_group":"mailroom","holder":"op","emails":1,"price_micros":"100"}' 127.0.0.1:50051 mailroom.v1.Collector/AcquireBudget
denied "sender token AddSuppression" grpcurl -plaintext -H "authorization: Bearer $SENDER_TOKEN" -d '{"address":"x@example.com"}' 127.0.0.1:50051 mailroom.v1.Collector/AddSuppression
denied "operator token Acknowledge" grpcurl -plaintext -H "authorization: Bearer $OPERATOR_TOKEN" -d '{"consumer_group":"audit","outcomes":[{"job_id":42,"outcome":"OUTCOME_SENT"}]}' 127.0.0.1:50051 mailroom.v1.Collector/Acknowledge
# FindEmails showed bob's suppression, and the audit recorded the calls and their outcomes.
out=$(grpcurl -plaintext -H "authorization: Bearer $OPERATOR_TOKEN" -d '{"consumer_group":"mailroom","address":"bob@example.com"}' 127.0.0.1:50051 mailroom.v1.Collector/FindEmails 2>&1) || true
if grep -q '"suppressed": true' <<<"$out"; then failed=$((failed + 1)); echo "FAIL bob still suppressed after RemoveSuppression: $out"
else passed=$((passed + 1)); echo "PASS FindEmails after RemoveSuppression: not suppressed"; fi
audit=$(psql -X -A -t "$MAILROOM_DATABASE_URL" -c "SELECT string_agg(method || ' ' || outcome, '; ' ORDER BY id) FROM mailroom.operator_audit WHERE method IN ('FindEmails', 'RemoveSuppression', 'Requeue')")
if grep -q 'Requeue OK: requeued 0; FindEmails OK: 1 emails; RemoveSuppression OK: removed manual; FindEmails OK: 1 emails' <<<"$audit"; then
  passed=$((passed + 1)); echo "PASS the audit: $audit"
else failed=$((failed + 1)); echo "FAIL the audit: $audit"; fi
denied "group operator PauseGroup elsewhere" grpcurl -plaintext -H "authorization: Bearer $GROUP_OPERATOR_TOKEN" -d '{"consumer_group":"mailroom","reason":"x"}' 127.0.0.1:50051 mailroom.v1.Collector/PauseGroup
denied "group operator ListAudit" grpcurl -plaintext -H "authorization: Bearer $GROUP_OPERATOR_TOKEN" -d '{}' 127.0.0.1:50051 mailroom.v1.Collector/ListAudit
denied "group operator FindEmails elsewhere" grpcurl -plaintext -H "authorization: Bearer $GROUP_OPERATOR_TOKEN" -d '{"consumer_group":"mailroom","address":"bob@example.com"}' 127.0.0.1:50051 mailroom.v1.Collector/FindEmails
out=$(grpcurl -plaintext -H "authorization: Bearer $GROUP_OPERATOR_TOKEN" -d '{"consumer_group":"audit","address":"bob@example.com"}' 127.0.0.1:50051 mailroom.v1.Collector/FindEmails 2>&1) || true
if grep -q '"actionName": "activation"' <<<"$out"; then passed=$((passed + 1)); echo "PASS group operator FindEmails in its group"
else failed=$((failed + 1)); echo "FAIL group operator FindEmails in its group: $out"; fi
for t in "$OPERATOR_TOKEN" "$SENDER_TOKEN" "$GROUP_OPERATOR_TOKEN"; do
  if grep -q -- "$t" "$WORK/collector.log"; then failed=$((failed + 1)); echo "FAIL token in the collector's log"; fi
done

echo "$passed passed, $failed failed ($n README commands)"
[ "$n" -ge 10 ] && [ "$failed" = 0 ]
