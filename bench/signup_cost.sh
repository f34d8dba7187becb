#!/usr/bin/env bash
# What mailroom's triggers cost the application's signup, trigger by trigger, and how a bulk
# import of accounts scales. Measurement only, no timed assertion.
#
# Starts its own PostgreSQL 15 (temp dir, 127.0.0.1 on a free port, stopped on exit, Ctrl-C or
# SIGTERM) with PostgreSQL's default settings (fsync on; --fsync=off turns fsync,
# synchronous_commit and full_page_writes off), applies migrations/*.up.sql in order, then:
#   triggers  --signups signups (INSERT INTO accounts), one per transaction, committed in a
#             procedure inside the server with synchronous_commit = off (so the figure is the
#             work the transaction does, not the WAL flush it waits for nor the client's round
#             trip), the variants below alternating for --rounds rounds; prints µs per signup
#             (median over rounds), the WAL bytes the server wrote per signup, and the
#             difference to the variant before:
#               bare      mailroom's triggers on accounts disabled (nothing queued)
#               signup    the account's trigger (before_account_insert): one row queued in
#                         mailroom_signups
#               +notify   and the wake-up (after_signup_inserted), that is mailroom as shipped
#             (with --migrations= a schema from before the signup queue: bare, token: the
#             account's trigger creating the activation token, +limits: the token limits
#             trigger, +notify: the wake-up after_token_inserted); then the collector's side: the
#             queued signups made tokens by mailroom_collect_signups in batches of 1,000, CPU µs
#             and WAL bytes per token
#   bulk      one INSERT INTO accounts ... SELECT ... FROM generate_series(1, N) per size, each
#             into an emptied accounts table, and one COPY of the largest size: seconds, rows/s
#             and the signups queued; then the collector's side: every queued signup collected
#             in batches of 1,000 (seconds, the backend's CPU per token) and the tokens created
#             (must equal the provisioned accounts).
#
# Usage: bash bench/signup_cost.sh [--fsync=on|off] [--rounds=3] [--signups=5000]
#                                  [--bulk=100000,300000,1000000] [--only=triggers|bulk]
#                                  [--migrations=DIR]   (another schema, e.g. an older commit's:
#   git archive COMMIT migrations | tar -x -C /tmp/old && ... --migrations=/tmp/old/migrations)
set -euo pipefail
ROOT=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

FSYNC=on
ROUNDS=3
SIGNUPS=5000
BULK=100000,300000,1000000
ONLY=""
MIGRATIONS=migrations
for a in "$@"; do
  case $a in
    --fsync=*) FSYNC=${a#--fsync=} ;;
    --rounds=*) ROUNDS=${a#--rounds=} ;;
    --signups=*) SIGNUPS=${a#--signups=} ;;
    --bulk=*) BULK=${a#--bulk=} ;;
    --only=*) ONLY=${a#--only=} ;;
    --migrations=*) MIGRATIONS=${a#--migrations=} ;;
    *) echo "signup_cost.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ $FSYNC == on || $FSYNC == off ]] || { echo "--fsync must be on or off" >&2; exit 2; }

PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/initdb ]] || { echo "PostgreSQL 15 is not installed (apt-get install postgresql)" >&2; exit 1; }
AS_PG=()
[[ $(id -u) == 0 ]] && AS_PG=(runuser -u postgres --)

DIR=$(mktemp -d /tmp/signup-cost.XXXXXX)
PGSTARTED=0
cleanup() {
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
DURABILITY=""
[[ $FSYNC == off ]] && DURABILITY="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
PGSTARTED=1
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR $DURABILITY" start >/dev/null

# The benchmark's statements play the application, which reaches mailroom's tables through its
# search path (docs/integration.md).
export PGOPTIONS="-c search_path=mailroom,public"
PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench"
PSQL+=(-d bench)
# mailroom's schema, then the versioned migrations, then the function and view sources (as
# `collector migrate` does).
"${PSQL[@]}" -c "CREATE SCHEMA IF NOT EXISTS mailroom"
for f in $(ls "$MIGRATIONS"/[0-9]*.up.sql | sort); do
  "${PSQL[@]}" -1 -f "$f" >/dev/null
done
if [[ -d $MIGRATIONS/functions ]]; then
  cat <(echo "SET check_function_bodies = off;") "$MIGRATIONS"/functions/*.sql \
      "$MIGRATIONS"/views/*.sql | "${PSQL[@]}" -1 >/dev/null
fi
"${PSQL[@]}" -c "CREATE SEQUENCE bench_seq"
echo "PostgreSQL $("${PSQL[@]}" -tAc 'SHOW server_version'), fsync $("${PSQL[@]}" -tAc 'SHOW fsync')," \
     "max_locks_per_transaction $("${PSQL[@]}" -tAc 'SHOW max_locks_per_transaction')," \
     "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

QUEUE=$("${PSQL[@]}" -tAc "SELECT to_regclass('mailroom_signups') IS NOT NULL")
variant() {
  local acct=DISABLE limits=DISABLE notify=DISABLE
  case $1 in
    bare) ;;
    token | signup) acct=ENABLE ;;
    +limits) acct=ENABLE limits=ENABLE ;;
    +notify) acct=ENABLE limits=ENABLE notify=ENABLE ;;
  esac
  if [[ $QUEUE == t ]]; then
    "${PSQL[@]}" -c "ALTER TABLE accounts $acct TRIGGER before_account_insert;
                     ALTER TABLE mailroom_signups $notify TRIGGER after_signup_inserted;"
  else
    "${PSQL[@]}" -c "ALTER TABLE accounts $acct TRIGGER before_account_insert;
                     ALTER TABLE tokens $limits TRIGGER before_token_insert_limits;
                     ALTER TABLE tokens $notify TRIGGER after_token_inserted;"
  fi
}
TICK=$(getconf CLK_TCK)
# Runs one statement in a session of its own between two reads of its backend's CPU time (utime
# + stime from /proc, lines "cpu"): on a loaded machine the wall time mostly measures waiting
# for a core. Then the WAL written meanwhile, in bytes (line "wal"; the server runs nothing
# else but its own background processes). Prints psql's output.
timed() {
  "${PSQL[@]}" -tA <<EOF
SELECT pg_backend_pid() AS pid, pg_current_wal_insert_lsn() AS wal0 \\gset
\\setenv BPID :pid
\\! awk '{print "cpu", \$14 + \$15}' /proc/\$BPID/stat
$1;
\\! awk '{print "cpu", \$14 + \$15}' /proc/\$BPID/stat
SELECT 'wal ' || pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'wal0');
EOF
}
# The CPU µs per row of timed's output $1 for $2 rows.
cpu_per_row() {
  echo "$1" | awk -v n="$2" -v t="$TICK" '/^cpu/ {c[++k] = $2} END {printf "%.1f", (c[2] - c[1]) / t * 1e6 / n}'
}
# The WAL bytes per row of timed's output $1 for $2 rows.
wal_per_row() {
  echo "$1" | awk -v n="$2" '/^wal/ {printf "%.0f", $2 / n}'
}
# The collector's side: every queued signup made a token, 1,000 per call and transaction (as
# the collector does).
if [[ $QUEUE == t ]]; then
  "${PSQL[@]}" <<'EOF'
CREATE PROCEDURE bench_collect() LANGUAGE plpgsql AS $$
BEGIN
    WHILE mailroom_collect_signups(1000) > 0 LOOP
        COMMIT;
    END LOOP;
END;
$$;
EOF
fi

if [[ -z $ONLY || $ONLY == triggers ]]; then
  # One signup per transaction, committed inside the server (a procedure), so that neither the
  # client's round trip nor its scheduling on a loaded machine is in the figure.
  "${PSQL[@]}" <<'EOF'
CREATE PROCEDURE bench_signups(p_n INT, INOUT p_us DOUBLE PRECISION DEFAULT 0)
    LANGUAGE plpgsql AS $$
DECLARE
    t0 TIMESTAMPTZ := clock_timestamp();
    n  BIGINT;
BEGIN
    SET synchronous_commit = off;
    FOR i IN 1..p_n LOOP
        n := nextval('bench_seq');
        INSERT INTO accounts (email, login) VALUES ('u' || n || '@bench.test', 'u' || n);
        COMMIT;
    END LOOP;
    p_us := EXTRACT(EPOCH FROM clock_timestamp() - t0) * 1e6 / p_n;
END;
$$;
EOF
  VARIANTS=(bare token +limits +notify)
  [[ $QUEUE == t ]] && VARIANTS=(bare signup +notify)
  COLLECT="" COLLECT_WAL=""
  declare -A US CPU WAL
  for ((r = 1; r <= ROUNDS; r++)); do
    for v in "${VARIANTS[@]}"; do
      variant "$v"
      out=$(timed "CALL bench_signups($SIGNUPS)")
      US[$v]+="$(printf '%.1f' "$(echo "$out" | grep -v '^cpu\|^wal')") "
      CPU[$v]+="$(cpu_per_row "$out" "$SIGNUPS") "
      WAL[$v]+="$(wal_per_row "$out" "$SIGNUPS") "
    done
    if [[ $QUEUE == t ]]; then
      # The signup and +notify runs queued 2 x SIGNUPS rows.
      out=$(timed "CALL bench_collect()")
      COLLECT+="$(cpu_per_row "$out" $((2 * SIGNUPS))) "
      COLLECT_WAL+="$(wal_per_row "$out" $((2 * SIGNUPS))) "
    fi
  done
  median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
  echo
  echo "per-signup cost in the server, one signup per transaction, synchronous_commit=off," \
       "median of $ROUNDS x $SIGNUPS signups: the backend's CPU, the wall time and the WAL written"
  printf '%-9s %12s %10s %12s %10s   %s\n' variant 'CPU µs' 'added' 'wall µs' 'WAL bytes' 'CPU runs'
  prev=""
  for v in "${VARIANTS[@]}"; do
    m=$(echo "${CPU[$v]}" | median)
    added=""
    [[ -n $prev ]] && added=$(echo "$m - $prev" | bc -l | xargs printf '%+.1f')
    printf '%-9s %12s %10s %12s %10s   %s\n' "$v" "$m" "$added" "$(echo "${US[$v]}" | median)" \
      "$(echo "${WAL[$v]}" | median)" "${CPU[$v]}"
    prev=$m
  done
  if [[ $QUEUE == t ]]; then
    printf '%-9s %12s %10s %12s %10s   %s\n' collect "$(echo "$COLLECT" | median)" '' '' \
      "$(echo "$COLLECT_WAL" | median)" "$COLLECT"
    echo "(collect: mailroom_collect_signups in the collector's transactions, CPU µs and WAL bytes per token created)"
  fi
  variant +notify
fi

if [[ -z $ONLY || $ONLY == bulk ]]; then
  echo
  echo "bulk import, one statement, one transaction, default settings"
  printf '%-28s %9s %8s %11s %9s %12s\n' statement rows seconds 'rows/s' 'queued/tokens' 'CPU µs/row'
  reset() {
    "${PSQL[@]}" -c "TRUNCATE accounts, tokens CASCADE" -c "CHECKPOINT"
    if [[ $QUEUE == t ]]; then "${PSQL[@]}" -c "TRUNCATE mailroom_signups"; fi
  }
  queued() {
    if [[ $QUEUE == t ]]; then "${PSQL[@]}" -tAc 'SELECT count(*) FROM mailroom_signups'
    else "${PSQL[@]}" -tAc 'SELECT count(*) FROM tokens'; fi
  }
  # The collector's side of an import: every queued signup made a token.
  collect() {
    [[ $QUEUE == t ]] || return 0
    local t0 s out
    t0=$(date +%s.%N)
    out=$(timed "CALL bench_collect()")
    s=$(echo "$(date +%s.%N) - $t0" | bc -l)
    printf '%-28s %9d %8.1f %11.0f %9s %12s\n' '  collected, 1,000 a call' "$1" "$s" \
      "$(echo "$1 / $s" | bc -l)" "$("${PSQL[@]}" -tAc 'SELECT count(*) FROM tokens')" \
      "$(cpu_per_row "$out" "$1")"
  }
  largest=0
  for n in ${BULK//,/ }; do
    reset
    t0=$(date +%s.%N)
    ((n > largest)) && largest=$n
    if ! err=$(timed "INSERT INTO accounts (email, login)
                     SELECT 'bulk' || i || '@bench.test', 'bulk' || i FROM generate_series(1, $n) i" 2>&1); then
      s=$(echo "$(date +%s.%N) - $t0" | bc -l)
      printf '%-28s %9d %8.1f  failed: %s\n' 'INSERT ... generate_series' "$n" "$s" "$(echo "$err" | head -1)"
      continue
    fi
    s=$(echo "$(date +%s.%N) - $t0" | bc -l)
    printf '%-28s %9d %8.1f %11.0f %9s %12s\n' 'INSERT ... generate_series' "$n" "$s" \
      "$(echo "$n / $s" | bc -l)" "$(queued)" "$(cpu_per_row "$err" "$n")"
    collect "$n"
  done
  reset
  "${PSQL[@]}" -c "COPY (SELECT 'copy' || i || '@bench.test', 'copy' || i
                         FROM generate_series(1, $largest) i) TO '$DIR/accounts.csv' (FORMAT csv)"
  t0=$(date +%s.%N)
  if ! err=$(timed "COPY accounts (email, login) FROM '$DIR/accounts.csv' (FORMAT csv)" 2>&1); then
    s=$(echo "$(date +%s.%N) - $t0" | bc -l)
    printf '%-28s %9d %8.1f  failed: %s\n' 'COPY' "$largest" "$s" "$(echo "$err" | head -1)"
    exit 0
  fi
  s=$(echo "$(date +%s.%N) - $t0" | bc -l)
  printf '%-28s %9d %8.1f %11.0f %9s %12s\n' 'COPY' "$largest" "$s" "$(echo "$largest / $s" | bc -l)" \
    "$(queued)" "$(cpu_per_row "$err" "$largest")"
  collect "$largest"
fi
