#!/usr/bin/env bash
# The dequeue's time beside a transaction that stays open elsewhere in the cluster: a role that
# may only connect, in another database, runs BEGIN; SELECT pg_current_xact_id(); pg_sleep.
# Every snapshot's xmin stays at that transaction while tokens pass.
#
# Starts its own PostgreSQL 15 (temp dir, 127.0.0.1 on a free port, stopped on exit), migrates
# a database with the collector binary (bazel build //collector:collector first), optionally
# replaces mailroom_dequeue with the body in --dequeue-sql=FILE (to time an earlier version:
# git show REV:migrations/functions/mailroom_dequeue.sql > old.sql), then times, from psql
# (\timing: each statement's round trip on loopback),
#   idle      an empty dequeue (--empty=200 calls) and a dequeue of 1,000 new tokens (--full=20
#             calls, 1,000 tokens inserted before each) with nothing else running;
#   held      the same after --tokens=300000 tokens were inserted and drained while the
#             stranger's transaction was open (it still is);
#   released  the same after that transaction ended.
# Prints per phase and kind: median, min and max in ms.
#
# Usage: bash bench/long_xact_dequeue.sh [--tokens=300000] [--empty=200] [--full=20]
#                                        [--dequeue-sql=FILE]
set -euo pipefail
ROOT=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

TOKENS=300000
EMPTY=200
FULL=20
BODY=""
for a in "$@"; do
  case $a in
    --tokens=*) TOKENS=${a#--tokens=} ;;
    --empty=*) EMPTY=${a#--empty=} ;;
    --full=*) FULL=${a#--full=} ;;
    --dequeue-sql=*) BODY=${a#--dequeue-sql=} ;;
    *) echo "long_xact_dequeue.sh: unknown argument $a (usage: [--tokens=N] [--empty=N] [--full=N] [--dequeue-sql=FILE])" >&2
       exit 2 ;;
  esac
done
for n in "$TOKENS" "$EMPTY" "$FULL"; do
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "--tokens, --empty and --full must be positive numbers" >&2; exit 2; }
done
[[ -z $BODY || -r $BODY ]] || { echo "--dequeue-sql: cannot read $BODY" >&2; exit 2; }
COLLECTOR=$ROOT/bazel-bin/collector/collector
[[ -x $COLLECTOR ]] || { echo "build the collector first: bazel build //collector:collector" >&2; exit 1; }
PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/initdb ]] || { echo "PostgreSQL 15 is not installed (apt-get install postgresql)" >&2; exit 1; }
AS_PG=()
[[ $(id -u) == 0 ]] && AS_PG=(runuser -u postgres --)

DIR=$(mktemp -d /tmp/long-xact.XXXXXX)
PGSTARTED=0
cleanup() {
  [[ -z ${HOLDER:-} ]] || kill "$HOLDER" 2>/dev/null || true
  if [[ $PGSTARTED == 1 ]]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ $(id -u) == 0 ]] && chown postgres:postgres "$DIR"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
  --no-sync >/dev/null
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PGSTARTED=1
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR" start >/dev/null

PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench" -c "CREATE ROLE stranger LOGIN"
MAILROOM_DATABASE_URL="postgresql://postgres@127.0.0.1:$PORT/bench" "$COLLECTOR" migrate >/dev/null 2>&1
PSQL+=(-d bench)
[[ -z $BODY ]] || "${PSQL[@]}" -f "$BODY" >/dev/null
ACCOUNT=$("${PSQL[@]}" -tAc "INSERT INTO mailroom.accounts (email, login, status, activated_at)
                              VALUES ('many@bench.test', 'many', 'active', 1) RETURNING id")
DEQUEUE="SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 1000, 'bench', 3600000);"
"${PSQL[@]}" -c "$DEQUEUE" >/dev/null  # the group's cursor starts here

# Recoveries of one account, the triggers skipped (the dequeue reads what they would have set).
insert_sql() {
  echo "SET session_replication_role = replica;
        INSERT INTO mailroom.tokens (account, action, priority, expires_at, address)
        SELECT $ACCOUNT, 'password_recovery', 'critical', EXTRACT(EPOCH FROM now())::BIGINT
               + 86400, 'many@bench.test' FROM generate_series(1, $1);
        SET session_replication_role = origin;"
}

# Times of the statements between \timing on and off, one per line, in ms.
timed() { "${PSQL[@]}" -f - | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'; }
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%8.3f %8.3f %8.3f", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
phase() {
  local empty full
  empty=$( { echo '\timing on'; for ((i = 0; i < EMPTY; i++)); do echo "$DEQUEUE"; done; } | timed | stats)
  full=$( { for ((i = 0; i < FULL; i++)); do
              echo '\timing off'; insert_sql 1000; echo '\timing on'; echo "$DEQUEUE"
            done; } | timed | stats)
  printf '%-9s empty %s   1,000 jobs %s\n' "$1" "$empty" "$full"
}

echo "PostgreSQL $("${PSQL[@]}" -tAc 'SHOW server_version'), $(nproc) cores, load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg); dequeue: ${BODY:-the current one}"
echo "phase     kind   median      min      max    kind        median      min      max (ms)"
phase idle

psql -X -q -h 127.0.0.1 -p "$PORT" -U stranger -d postgres \
  -c "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(86400);" >/dev/null 2>&1 &
HOLDER=$!
until [[ $("${PSQL[@]}" -tAc "SELECT count(*) FROM pg_stat_activity WHERE usename = 'stranger'
                               AND backend_xid IS NOT NULL") == 1 ]]; do sleep 0.1; done
for ((done = 0; done < TOKENS; done += 50000)); do
  insert_sql $(( TOKENS - done < 50000 ? TOKENS - done : 50000 )) | "${PSQL[@]}" -f - >/dev/null
done
drained=0
while :; do
  n=$("${PSQL[@]}" -tAc "SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 10000, 'bench', 3600000)")
  (( n == 0 )) && break
  drained=$((drained + n))
done
echo "($TOKENS tokens inserted and $drained drained beside the stranger's open transaction)"
phase held

"${PSQL[@]}" -tAc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'stranger'" >/dev/null
wait "$HOLDER" 2>/dev/null || true
HOLDER=""
phase released
