#!/usr/bin/env bash
# A real Prometheus scrapes a real collector and sender (file transport) on a throwaway
# PostgreSQL and evaluates deploy/prometheus/rules.yml: the metrics keep their names, the
# histograms are exposed, the recording rules produce series and an alert goes pending when the
# sender loses its collector. Also `promtool check rules` and `promtool test rules` on the file.
# Everything binds 127.0.0.1; everything started here is stopped on exit.
set -euo pipefail
RUN=${TEST_SRCDIR:-$(pwd)/bazel-bin/integration_tests/prometheus_test.runfiles}/mailroom
COLLECTOR=$RUN/collector/collector
SENDER=$RUN/sender/sender
RULES_DIR=$RUN/deploy/prometheus
PYTHON=/usr/bin/python3
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (run .ci/setup)"; exit 1; }
done
PGBIN=/usr/lib/postgresql/15/bin
WORK=$(mktemp -d /tmp/prometheus-test.XXXXXX)
chmod 755 "$WORK"
COLLECTOR_PID="" SENDER_PID="" PROM_PID=""
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
stop() { [ -n "$1" ] && kill "$1" 2>/dev/null && wait "$1" 2>/dev/null || true; }
cleanup() {
  stop "$PROM_PID"
  stop "$SENDER_PID"
  stop "$COLLECTOR_PID"
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "PASS $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }

# promtool on the shipped rules: syntax, and the alerts' unit tests (rules_test.yml).
if out=$(promtool check rules "$RULES_DIR/rules.yml" 2>&1); then ok "promtool check rules"
else bad "promtool check rules: $out"; fi
if out=$(cd "$RULES_DIR" && promtool test rules rules_test.yml 2>&1); then ok "promtool test rules"
else bad "promtool test rules: $out"; fi

# PostgreSQL, then the collector and a sender writing .eml files.
mkdir -p "$WORK/pg" "$WORK/outbox"
cd "$WORK"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$WORK/pg"
PGPORT=$(free_port)
as_pg "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $WORK/pg -c fsync=off" start >/dev/null
export MAILROOM_DATABASE_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
"$COLLECTOR" migrate >/dev/null 2>&1
psql_exec() { psql -q -X -v ON_ERROR_STOP=1 "$MAILROOM_DATABASE_URL" -c "$1" >/dev/null; }

GRPC_PORT=$(free_port) COLLECTOR_METRICS=$(free_port) SENDER_METRICS=$(free_port) PROM_PORT=$(free_port)
TOKEN=prometheus-test-sender-token-0123456789
MAILROOM_SECRET_KEY=$(openssl rand -hex 32) MAILROOM_SUBSCRIBER_TOKENS="$TOKEN@mailroom:subscriber" \
  MAILROOM_LISTEN_ADDRESS=127.0.0.1:$GRPC_PORT MAILROOM_METRICS_ADDRESS=127.0.0.1:$COLLECTOR_METRICS \
  MAILROOM_BATCH_TIMEOUT=0 MAILROOM_POLL_INTERVAL=500 MAILROOM_REPUTATION_REFRESH=500 \
  "$COLLECTOR" >"$WORK/collector.log" 2>&1 &
COLLECTOR_PID=$!
MAILROOM_COLLECTOR_ADDRESS=127.0.0.1:$GRPC_PORT MAILROOM_COLLECTOR_TOKEN=$TOKEN \
  MAILROOM_TRANSPORT=file MAILROOM_FILE_DIR=$WORK/outbox MAILROOM_HEALTH_ADDRESS=off \
  MAILROOM_METRICS_ADDRESS=127.0.0.1:$SENDER_METRICS MAILROOM_SENDER_NAME=prometheus-test \
  "$SENDER" >"$WORK/sender.log" 2>&1 &
SENDER_PID=$!

# Prometheus: 1 s scrapes and rule evaluations, storage in the temp dir, loopback only.
cp "$RULES_DIR/rules.yml" "$WORK/rules.yml"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: mailroom-collector
    static_configs: [{targets: ["127.0.0.1:$COLLECTOR_METRICS"]}]
  - job_name: mailroom-sender
    static_configs: [{targets: ["127.0.0.1:$SENDER_METRICS"]}]
EOF
promtool check config "$WORK/prometheus.yml" >/dev/null
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address=127.0.0.1:$PROM_PORT --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

# api PATH [PARAM=VALUE]...: GET from Prometheus' HTTP API; prints the JSON "data" (or nothing).
api() {
  "$PYTHON" - "$PROM_PORT" "$@" <<'EOF' 2>/dev/null || true
import json, sys, urllib.parse, urllib.request
port, path, params = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
url = "http://127.0.0.1:%s%s?%s" % (port, path, urllib.parse.urlencode(params))
body = json.load(urllib.request.urlopen(url, timeout=5))
if body.get("status") == "success":
    print(json.dumps(body["data"]))
EOF
}
# value EXPR: the first sample of an instant query, or nothing.
value() {
  api /api/v1/query "query=$1" | "$PYTHON" -c '
import json, sys
text = sys.stdin.read()
r = json.loads(text)["result"] if text.strip() else []
print(r[0]["value"][1] if r else "")'
}
# until_true DESCRIPTION COMMAND...: polls the command (up to 60 s) until it succeeds.
until_true() {
  local what=$1; shift
  local deadline=$((SECONDS + 60))
  while ! "$@"; do
    if [ $SECONDS -ge $deadline ]; then bad "$what (timed out)"; return 1; fi
    sleep 0.25
  done
  ok "$what"
}
# is EXPR OP NUMBER: the query has a sample and the comparison holds.
is() {
  local v
  v=$(value "$1")
  [ -n "$v" ] && "$PYTHON" -c "import sys; v=float(sys.argv[1]); sys.exit(0 if v $2 $3 else 1)" "$v"
}
report() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ] || { echo "--- collector.log"; tail -n 20 "$WORK/collector.log";
    echo "--- sender.log"; tail -n 20 "$WORK/sender.log";
    echo "--- prometheus.log"; tail -n 20 "$WORK/prometheus.log"; }
}
trap 'report; cleanup' EXIT

until_true "both targets are up" is 'sum(up{job=~"mailroom-.*"})' == 2
until_true "the sender is subscribed" is 'mailroom_sender_connected' == 1

# Two rounds of 3 activations (new accounts: the trigger's tokens) and 3 password recoveries
# (active accounts), the second after Prometheus has seen the first, so that rates are above 0.
insert() {
  psql_exec "INSERT INTO mailroom.accounts (email, login) SELECT 'n$1-' || i || '@example.test', 'n$1-' || i FROM generate_series(1, 3) i"
  psql_exec "INSERT INTO mailroom.accounts (email, login, status) SELECT 'a$1-' || i || '@example.test', 'a$1-' || i, 'active' FROM generate_series(1, 3) i"
  psql_exec "INSERT INTO mailroom.tokens (account, action) SELECT id, 'password_recovery' FROM mailroom.accounts WHERE login LIKE 'a$1-%'"
}
insert 1
until_true "6 sent jobs scraped" is 'sum(mailroom_sender_jobs_total{outcome="sent"})' == 6
insert 2
until_true "12 sent jobs scraped" is 'sum(mailroom_sender_jobs_total{outcome="sent"})' == 12
until_true "sent by action" is 'mailroom_sender_jobs_total{action="password_recovery",outcome="sent"}' == 6
until_true "commit-to-sent histogram counts every sent job" \
  is 'sum(mailroom_sender_commit_to_sent_seconds_count)' == 12
until_true "commit-to-sent has buckets per action" \
  is 'count(mailroom_sender_commit_to_sent_seconds_bucket{action="activation",le="600"})' == 1
until_true "send duration per transport" \
  is 'mailroom_sender_send_duration_seconds_count{transport="file"}' '>=' 12
until_true "collector dequeue duration" \
  is 'mailroom_collector_dequeue_duration_seconds_count{group="mailroom"}' '>' 0
until_true "collector counters keep their names" \
  is 'mailroom_collector_jobs_dispatched_total{group="mailroom"}' '>=' 12
until_true "collector gauges from the collect hook" is 'mailroom_queue_depth{group="mailroom"}' '>=' 0
until_true "recording rule mailroom:sent:rate5m evaluates" \
  is 'sum(mailroom:sent:rate5m)' '>' 0
until_true "recording rule mailroom:commit_to_sent_seconds:p99_10m evaluates" \
  is 'mailroom:commit_to_sent_seconds:p99_10m{action="password_recovery"}' '>' 0
rules_ok() {
  api /api/v1/rules | "$PYTHON" -c '
import json, sys
text = sys.stdin.read()
rules = [r for g in json.loads(text)["groups"] for r in g["rules"]] if text.strip() else []
sys.exit(0 if len(rules) == 10 and all(r["health"] == "ok" for r in rules) else 1)'
}
until_true "all 10 rules loaded and healthy" rules_ok
until_true "reputation: the 12 emails sent counted in the window" \
  is 'mailroom_reputation_sent{group="mailroom"}' '==' 12
until_true "reputation: bounce rate gauge" is 'mailroom_reputation_bounce_rate{group="mailroom"}' '==' 0
n_eml=$(find "$WORK/outbox" -name '*.eml' | wc -l)
if [ "$n_eml" = 12 ]; then ok "12 emails in the outbox"; else bad "outbox has $n_eml emails, not 12"; fi

# The collector goes away: the sender reports itself disconnected and the alert goes pending.
stop "$COLLECTOR_PID"
COLLECTOR_PID=""
alert_pending() {
  api /api/v1/alerts | "$PYTHON" -c '
import json, sys
text = sys.stdin.read()
alerts = json.loads(text)["alerts"] if text.strip() else []
sys.exit(0 if any(a["labels"]["alertname"] == "MailroomSenderDisconnected" and
                  a["state"] == "pending" for a in alerts) else 1)'
}
until_true "MailroomSenderDisconnected pending once the collector is gone" alert_pending

if grep -q -- "$TOKEN" "$WORK/collector.log" "$WORK/sender.log"; then bad "token in a log"; fi
[ "$failed" = 0 ]
