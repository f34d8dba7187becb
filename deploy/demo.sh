#!/usr/bin/env bash
# The mailroom demo: on a fresh Debian 12 machine (as root) installs what is missing, builds,
# starts a throwaway PostgreSQL, applies the migrations, runs the collector and the sender (file
# transport) and the reference front end (examples/frontend), creates a few accounts and a
# password recovery, shows the delivered emails, opens an activation link as a corporate link
# scanner would (nothing changes) and then clicks it (the account becomes active).
# It then keeps running so you can add accounts yourself; Ctrl-C stops everything and removes
# the throwaway database.
#
#   bash deploy/demo.sh            # interactive: waits for Ctrl-C
#   DEMO_EXIT=1 bash deploy/demo.sh  # stops by itself once the emails are shown (used by tests)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Installing what is missing (apt, npm) — quiet unless something is missing"
bash .ci/setup

say "Building collector, sender and verify (bazel, offline, optimised)"
bazel build -c opt //collector:collector //collector:verify //sender:sender 2>&1 |
  grep -E '^(ERROR|FAILED)|Build completed' || true
BIN="$ROOT/bazel-bin"
for b in collector/collector collector/verify sender/sender; do
  [ -x "$BIN/$b" ] || { echo "demo: build failed ($b missing)" >&2; exit 1; }
done
# Copy the binaries out of bazel-bin so a later build cannot swap them under the demo.
DEMO=$(mktemp -d /tmp/mailroom-demo.XXXXXX)
chmod 755 "$DEMO"
cp "$BIN/collector/collector" "$BIN/collector/verify" "$BIN/sender/sender" "$DEMO/"

PIDS=()
PG_STARTED=0
PGBIN=/usr/lib/postgresql/15/bin
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  trap - EXIT INT TERM
  echo
  say "Stopping"
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$PG_STARTED" = 1 ]; then as_pg "$PGBIN/pg_ctl" -D "$DEMO/pg" -m fast -w stop >/dev/null || true; fi
  if [ "${DEMO_KEEP:-0}" = 1 ]; then
    echo "kept $DEMO (outbox/, *.log)"
  else
    rm -rf "$DEMO"
  fi
  echo "stopped; nothing left running"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "Starting a throwaway PostgreSQL 15 in $DEMO/pg"
PGPORT=$(free_port)
mkdir -p "$DEMO/pg" "$DEMO/outbox"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$DEMO/pg"
as_pg "$PGBIN/initdb" -D "$DEMO/pg" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$DEMO/pg" -l "$DEMO/pg/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $DEMO/pg" start >/dev/null
PG_STARTED=1
export MAILROOM_DATABASE_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
psql_() { psql -q -X -v ON_ERROR_STOP=1 "$MAILROOM_DATABASE_URL" "$@"; }

say "Applying migrations: collector migrate"
"$DEMO/collector" migrate
"$DEMO/collector" migrate status

say "Creating the application's role: mailroom.grant_application('app')"
psql_ -c "CREATE ROLE app LOGIN" -c "SELECT mailroom.grant_application('app')"
APP_DATABASE_URL="postgresql://app@127.0.0.1:$PGPORT/postgres"

# Fresh secrets for this run only; never printed.
export MAILROOM_SECRET_KEY=$(openssl rand -hex 32)
TOKEN=$(openssl rand -hex 24)
GRPC_PORT=$(free_port)
FRONTEND_PORT=$(free_port)
FRONTEND=http://127.0.0.1:$FRONTEND_PORT

say "Starting the collector on 127.0.0.1:$GRPC_PORT (log: $DEMO/collector.log)"
MAILROOM_LISTEN_ADDRESS=127.0.0.1:$GRPC_PORT MAILROOM_SUBSCRIBER_TOKENS=$TOKEN@mailroom:sender \
  MAILROOM_BATCH_TIMEOUT=200 MAILROOM_DEFAULT_GROUP_BUDGET=5 \
  MAILROOM_METRICS_ADDRESS=127.0.0.1:$(free_port) \
  "$DEMO/collector" >"$DEMO/collector.log" 2>&1 &
PIDS+=($!)

say "Starting the sender, file transport into $DEMO/outbox (log: $DEMO/sender.log)"
env -u MAILROOM_SECRET_KEY -u MAILROOM_DATABASE_URL \
  MAILROOM_COLLECTOR_ADDRESS=127.0.0.1:$GRPC_PORT MAILROOM_COLLECTOR_TOKEN=$TOKEN \
  MAILROOM_TRANSPORT=file MAILROOM_FILE_DIR="$DEMO/outbox" \
  MAILROOM_FROM="Example <no-reply@example.test>" MAILROOM_PRODUCT_NAME="Example" \
  MAILROOM_LINK_BASE_URL=$FRONTEND \
  MAILROOM_METRICS_ADDRESS=127.0.0.1:$(free_port) MAILROOM_HEALTH_ADDRESS=127.0.0.1:$(free_port) \
  "$DEMO/sender" >"$DEMO/sender.log" 2>&1 &
PIDS+=($!)

say "Starting the reference front end on $FRONTEND, as the role app (log: $DEMO/frontend.log)"
env -u MAILROOM_DATABASE_URL MAILROOM_FRONTEND_ADDRESS=127.0.0.1:$FRONTEND_PORT \
  MAILROOM_FRONTEND_DATABASE_URL="$APP_DATABASE_URL" \
  /usr/bin/python3 "$ROOT/examples/frontend/frontend.py" >"$DEMO/frontend.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q 'msg=listening' "$DEMO/frontend.log" && break; sleep 0.1; done
grep -q 'msg=listening' "$DEMO/frontend.log" || { echo "demo: the front end did not start:" >&2; cat "$DEMO/frontend.log" >&2; exit 1; }

say "Creating accounts: two new ones (activation emails) and an active one that forgot its password"
psql_ <<'SQL'
-- New accounts: the trigger queues each signup; the collector creates its activation token.
INSERT INTO mailroom.accounts (email, login) VALUES
  ('ada@example.test', 'ada'),
  ('grace@example.test', 'Grace "Amazing" Hopper');
-- An account that activated long ago (imported active: no activation token, nothing sent) ...
INSERT INTO mailroom.accounts (email, login, status, activated_at)
  VALUES ('linus@example.test', 'linus', 'active', EXTRACT(EPOCH FROM NOW())::BIGINT - 86400);
-- ... asks for a password recovery through the application's interface.
SELECT r.* FROM mailroom.accounts a, mailroom.request(a.id, 'password_recovery') r
 WHERE a.login = 'linus';
SQL

say "Waiting for the three emails"
for _ in $(seq 1 300); do
  n=$(find "$DEMO/outbox" -name '*.eml' | wc -l)
  [ "$n" -ge 3 ] && break
  for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "demo: a service died; its log:" >&2; tail -n 20 "$DEMO"/*.log >&2; exit 1; }
  done
  sleep 0.1
done
n=$(find "$DEMO/outbox" -name '*.eml' | wc -l)
[ "$n" -ge 3 ] || { echo "demo: only $n emails after 30 s" >&2; tail -n 20 "$DEMO"/*.log >&2; exit 1; }

say "Delivered: $DEMO/outbox"
ls -1 "$DEMO/outbox"
say "Deliveries as PostgreSQL records them"
# The sender writes an email before its SENT outcome is acknowledged and committed: wait (up to
# 10 s) until no job is still leased, so that the table shows the outcomes.
for _ in $(seq 1 100); do
  [ "$(psql_ -tAc "SELECT count(*) FROM mailroom.delivery_states WHERE state = 'leased'")" = 0 ] && break
  sleep 0.1
done
psql_ -c "SELECT d.token_id, t.action, a.login, d.state, d.attempts
            FROM mailroom.delivery_states d JOIN mailroom.tokens t ON t.id = d.token_id
            JOIN mailroom.accounts a ON a.id = t.account
           ORDER BY d.token_id"

# Show each email as a mail client would (headers decoded, text part), with Python's email
# package; then check the recovery link's token and code with the verify tool.
show() {
  python3 - "$1" <<'PY'
import email, email.policy, sys
m = email.message_from_binary_file(open(sys.argv[1], 'rb'), policy=email.policy.default)
for h in ('From', 'To', 'Subject', 'Date', 'Message-ID'):
    print(f'{h}: {m[h]}')
print()
print(m.get_body(('plain',)).get_content().rstrip())
PY
}
recovery="" activation=""
for f in "$DEMO"/outbox/*.eml; do
  say "$(basename "$f")"
  # Captured first: `show | grep -q` would end the pipe early (a broken pipe under pipefail).
  shown=$(show "$f")
  printf '%s\n' "$shown"
  if grep -q '/recover?token=' <<<"$shown"; then recovery=$shown; fi
  if grep -q '^To: .*ada@example.test' <<<"$shown"; then activation=$shown; fi
done

if [ -n "$recovery" ]; then
  token=$(grep -o 'token=[A-Za-z0-9_-]*' <<<"$recovery" | head -1)
  code=$(grep -o 'code is [0-9]\{5\}' <<<"$recovery" | grep -o '[0-9]\{5\}')
  say "Checking the recovery link's token and code with the verify tool"
  echo "${token#token=}" | "$DEMO/verify" --action=password_recovery --token=- --code="$code"
fi

# The front end: a link scanner's GET and HEAD change nothing; the user's click (POST) does.
http() {  # http METHOD URL [FORM]: prints the status and the page's title
  python3 - "$@" <<'PY'
import re, sys, urllib.error, urllib.request
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method, headers={"User-Agent": "demo"})
try:
    r = urllib.request.urlopen(req, timeout=10)
except urllib.error.HTTPError as e:
    r = e
body = r.read().decode()
title = re.search(r"<title>(.*?)</title>", body)
what = title.group(1) if title else (r.headers["Content-Type"] if body else "(no body)")
print("  %s %s -> %d %s" % (method, url.split("?")[0], r.status, what))
PY
}
account_state() {
  psql_ -tA -c "SELECT 'account ada: ' || status FROM mailroom.accounts WHERE login = 'ada'"
}
if [ -n "$activation" ]; then
  link=$(grep -o "$FRONTEND/activate?token=[A-Za-z0-9_-]*" <<<"$activation" | head -1)
  say "The front end: ada's activation link, first as a link scanner opens it"
  account_state
  http GET "$link"
  http HEAD "$link"
  http GET "$FRONTEND/static/style.css"
  account_state
  echo "  tokens consumed: $(psql_ -tA -c "SELECT count(*) FROM mailroom.tokens WHERE consumed_at IS NOT NULL")"
  say "Then as ada clicks the page's button (POST)"
  http POST "$FRONTEND/activate" "token=${link#*token=}"
  account_state
  http POST "$FRONTEND/activate" "token=${link#*token=}"
fi

cat <<EOF

Look at the emails with any mail client, or:  less $DEMO/outbox/*.eml
Add an account:  psql '$MAILROOM_DATABASE_URL' -c "INSERT INTO mailroom.accounts (email, login) VALUES ('you@example.test', 'you')"
Queue stats:     psql '$MAILROOM_DATABASE_URL' -c "SELECT * FROM mailroom.mailroom_stats(NULL)"
Open a link:     the links in the emails go to the front end, $FRONTEND
Logs:            $DEMO/collector.log  $DEMO/sender.log  $DEMO/frontend.log
EOF

if [ "${DEMO_EXIT:-0}" = 1 ]; then exit 0; fi
say "Running. Ctrl-C stops everything."
while true; do
  for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "demo: a service exited; see $DEMO/*.log" >&2; exit 1; }
  done
  sleep 1
done
