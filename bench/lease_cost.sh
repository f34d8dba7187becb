#!/usr/bin/env bash
# Where a drained job's time goes: each SQL step of the collector's drain per
# 1000-job batch, and a batch-lease prototype beside it. Measurement only: the prototype lives in
# the scratch schema lease_proto of a throwaway database (bench/lease_cost_proto.sql).
#
# Starts its own PostgreSQL 15 (temp dir, 127.0.0.1 on a free port + a socket in the temp dir,
# stopped on exit, Ctrl-C or SIGTERM), applies migrations/*.up.sql in order, queues N activations
# the way bench/collector_bench does (accounts inserted 10,000 per transaction), VACUUM ANALYZE,
# then runs, each on a fresh consumer group over the same backlog (deliveries and the prototype's
# tables emptied between committed runs):
#   a  the current path as the collector runs it (collector/store/store.cc), timed inside PostgreSQL
#      with clock_timestamp() ("a server") and per statement from psql's \timing ("a client");
#      since the batch leases that is the batch-lease path (one lease_batches row per dequeue
#      window, SENT outcomes set bits), no longer one deliveries row per job;
#   b  inside the dequeue/acknowledgement, each statement committed: the window read alone, the
#      INSERT of the delivery rows alone, the acknowledgement's UPDATE alone, with and without
#      0013's statement triggers, with all indexes of deliveries and with its primary key only
#      (dropped, then created again). Since 0021 the INSERT and the UPDATE are the per-job path
#      before 0021 (still taken by jobs handed out again), timed on their own; the dequeue and
#      the acknowledgement of a first lease write no deliveries row, so the variants of
#      deliveries' triggers and indexes barely touch them;
#   c  the batch-lease prototype: whole-batch acks, 5 partial acks of 200, 990 SENT + 10 RETRY;
#      server-side and (whole-batch acks) per statement from psql; then a fencing check.
# Prints one table per run: step, ms per 1000-job batch (median, min, max over the batches),
# implied jobs/s (1000 / median).
#
# With --nested, run a is also split per statement inside the functions (pg_stat_statements,
# track = all, track_planning = on, loaded only then, as its bookkeeping slows every statement a
# little): each statement's execution and planning time per 1000-job batch and how often it was
# planned, busiest first.
#
# Usage: bash bench/lease_cost.sh [--jobs=100000] [--fsync=on|off] [--nested]
#        bash bench/lease_cost.sh --collector-cpu [--statements] [--perf] [collector_bench flags]
#   (or bazel run //bench:lease_cost -- ...)
# --collector-cpu runs bazel-bin/bench/collector_bench (build it first:
# bazel build -c opt //bench:collector_bench; default flags --sizes=100000 --rates= --fsync=on
# --stats=with) and prints the CPU seconds (utime + stime from /proc) used during each drain,
# that is while a collector process lives, by the collector, by PostgreSQL (every process of the
# bench's postmaster; a backend that exits keeps its last reading, taken at most 50 ms before) and by
# collector_bench itself (the subscriber and its acknowledging thread), per job drained.
# --statements also logs every statement of the drain with its duration on that server
# (log_min_duration_statement = 0, which costs the server a little) and sums them per kind;
# --perf samples the collector with perf (cpu-clock) and prints its CPU by library and function.
set -euo pipefail
ROOT=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

JOBS=100000
FSYNC=on
CPU_MODE=0
NESTED=0
STATEMENTS=0
PERF=0
CPU_ARGS=()
for a in "$@"; do
  case $CPU_MODE:$a in
    1:--statements) STATEMENTS=1 ;;
    1:--perf) PERF=1 ;;
    1:*) CPU_ARGS+=("$a") ;;  # after --collector-cpu: collector_bench's flags
    0:--jobs=*) JOBS=${a#--jobs=} ;;
    0:--fsync=*) FSYNC=${a#--fsync=} ;;
    0:--nested) NESTED=1 ;;
    0:--collector-cpu) CPU_MODE=1 ;;
    *) echo "lease_cost.sh: unknown argument $a (usage: [--jobs=N] [--fsync=on|off] [--nested] | --collector-cpu [--statements] [--perf] [collector_bench flags])" >&2
       exit 2 ;;
  esac
done

TICK=$(getconf CLK_TCK)

# utime+stime of process $1 in clock ticks into TICKS, and its state into PSTATE (both empty
# when the process is gone). Fields are counted after the ')' that ends the command name; no
# subshell, as this runs for every process of the server 20 times a second.
read_ticks() {
  TICKS="" PSTATE=""
  local stat f
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 0
  # shellcheck disable=SC2206
  f=(${stat##*) })
  PSTATE=${f[0]} TICKS=$(( f[11] + f[12] ))
}

# CPU ticks of the postmaster $1 and of each of its children, first and last reading per pid
# (a backend that starts during the drain starts from 0; one that exits keeps its last reading,
# at most one sampling interval short).
# Each process is classed once by its title: client backends (the collector's connections),
# autovacuum workers, and the rest (postmaster, walwriter, checkpointer, ...).
declare -A FIRST LAST KIND
sample_pg() {  # postmaster first-sample(1|0)
  local kids=() c title
  { read -r -a kids <"/proc/$1/task/$1/children"; } 2>/dev/null || true
  for c in "$1" "${kids[@]}"; do
    read_ticks "$c"
    [[ -n $TICKS ]] || continue
    if [[ -z ${FIRST[$c]:-} ]]; then
      FIRST[$c]=$(( $2 ? TICKS : 0 ))
      title=$(tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null || true)
      case $title in
        *"autovacuum worker"*) KIND[$c]=autovacuum ;;
        "postgres: postgres "*) KIND[$c]=backends ;;
        *) KIND[$c]=other ;;
      esac
    fi
    LAST[$c]=$TICKS
  done
}
pg_used() {  # [kind]
  local c total=0
  for c in "${!LAST[@]}"; do
    [[ -z ${1:-} || ${KIND[$c]} == "$1" ]] && total=$(( total + LAST[$c] - FIRST[$c] ))
  done
  echo "$total"
}

# The server of a collector: the port of its MAILROOM_DATABASE_URL, matched against the
# postmaster.pid files of the test servers (other test servers may run beside it).
# Sets PM (postmaster pid), PGPORT_OF and PGDIR_OF (the server's temp dir).
server_of() {
  local f
  PM="" PGDIR_OF=""
  PGPORT_OF=$(tr '\0' '\n' <"/proc/$1/environ" | sed -n 's|^MAILROOM_DATABASE_URL=.*:\([0-9]*\)/.*|\1|p')
  for f in /tmp/mailroom-pg.*/data/postmaster.pid; do
    if [[ -r $f && $(sed -n 4p "$f") == "$PGPORT_OF" ]]; then
      PM=$(sed -n 1p "$f") PGDIR_OF=${f%/data/postmaster.pid}
      return
    fi
  done
}

# With --statements: every statement of the drain logged with its duration (ALTER SYSTEM on the
# bench's throwaway server, applied to open sessions by a reload), copied from its server.log;
# summarised per kind (the function called, or the command) when the drain ends.
start_statement_log() {
  tail -n0 -F "$PGDIR_OF/server.log" >"$out.log" 2>/dev/null &
  tailpid=$!
  psql -X -q -h 127.0.0.1 -p "$PGPORT_OF" -U postgres -d postgres \
    -c "ALTER SYSTEM SET log_min_duration_statement = 0" -c "SELECT pg_reload_conf()" >/dev/null
}
# With --perf: the collector sampled by perf (software clock, 999 Hz) while it lives; its CPU
# split by library and by function.
perf_summary() {
  wait "$perfpid" 2>/dev/null || true
  echo "  collector CPU by library, perf cpu-clock ($(perf report -i "$out.perf" --stdio 2>/dev/null |
    sed -n 's/^# Samples: \([^ ]*\) .*/\1/p' | head -1) samples):"
  perf report -i "$out.perf" --no-children --sort dso --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -12 | sed 's/ *$//; s/^/   /'
  echo "  collector CPU by function (top 25):"
  perf report -i "$out.perf" --no-children --sort dso,symbol --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -25 | sed 's/[ -]*$//; s/^/   /' | cut -c1-160
}
statement_summary() {  # jobs
  kill "$tailpid" 2>/dev/null || true
  wait "$tailpid" 2>/dev/null || true
  awk -v n="$1" '
    /duration: [0-9.]+ ms/ {
      ms = $0; sub(/.*duration: /, "", ms); sub(/ ms.*/, "", ms)
      st = $0; sub(/.*duration: [0-9.]+ ms +/, "", st); sub(/^(execute [^:]*|statement|parse [^:]*|bind [^:]*): */, "", st)
      if (match(st, /mailroom_[a-z_]+/)) k = substr(st, RSTART, RLENGTH); else { split(st, w, " "); k = toupper(w[1]) " " toupper(w[2]) }
      calls[k]++; total[k] += ms; all += ms
    }
    END {
      printf "  statements logged during the drain (wall ms as the server saw them, busiest first):\n"
      printf "    %-34s %7s %10s %9s %11s\n", "kind", "calls", "total ms", "ms/call", "µs per job"
      for (k in calls)
        printf "%012.1f\t    %-34s %7d %10.1f %9.3f %11.2f\n", total[k], k, calls[k], total[k],
               total[k] / calls[k], n ? total[k] * 1000 / n : 0 | "sort -r | cut -f2-"
      close("sort -r | cut -f2-")
      printf "    %-34s %7s %10.1f %9s %11.2f\n", "all", "", all, "", n ? all * 1000 / n : 0
    }' "$out.log"
}

collector_cpu() {
  [[ ${#CPU_ARGS[@]} -gt 0 ]] || CPU_ARGS=(--sizes=100000 --rates= --fsync=on --stats=with)
  local bench=bazel-bin/bench/collector_bench
  [[ -x $bench ]] || { echo "build it first: bazel build -c opt //bench:collector_bench" >&2; exit 1; }
  out=$(mktemp /tmp/lease-cost-cpu.XXXXXX)
  trap 'kill "${bpid:-}" "${tailpid:-}" "${perfpid:-}" 2>/dev/null || true; rm -f "${out:-}" "${out:-}".*' EXIT
  trap 'exit 130' INT TERM
  # Runfiles: collector_bench finds the collector through RUNFILES_DIR.
  RUNFILES_DIR="$ROOT/$bench.runfiles" "$bench" "${CPU_ARGS[@]}" >"$out" 2>&1 &
  bpid=$!
  local cpid="" pm="" c0 c1 b0 b1 t0 t1 drains=0 n
  # Every 50 ms: a collector appears for each drain (after the backlog is queued) and is stopped
  # by the bench once everything is acknowledged; the window is the collector's lifetime.
  while kill -0 "$bpid" 2>/dev/null; do
    if [[ -z $cpid ]]; then
      cpid=$(pgrep -P "$bpid" -x collector || true)
      if [[ -n $cpid ]]; then
        server_of "$cpid"
        pm=$PM
        [[ -n $pm ]] || { echo "cannot find the collector's PostgreSQL" >&2; exit 1; }
        [[ $STATEMENTS == 0 ]] || start_statement_log
        if [[ $PERF == 1 ]]; then
          perf record -q -e cpu-clock -F 999 -o "$out.perf" -p "$cpid" >/dev/null 2>&1 &
          perfpid=$!
        fi
        FIRST=() LAST=() KIND=()
        t0=$EPOCHREALTIME
        read_ticks "$cpid"; c0=$TICKS c1=$TICKS
        read_ticks "$bpid"; b0=$TICKS b1=$TICKS
        sample_pg "$pm" 1
      fi
    else
      read_ticks "$cpid"
      if [[ -n $TICKS && $PSTATE != Z ]]; then
        c1=$TICKS t1=$EPOCHREALTIME
        read_ticks "$bpid"; b1=${TICKS:-$b1}
        sample_pg "$pm" 0
      else
        drains=$((drains + 1))
        n=$(grep -o 'drained [0-9]* of' "$out" | sed -n "${drains}p" | awk '{print $2}')
        awk -v c="$((c1 - c0))" -v p="$(pg_used)" -v b="$((b1 - b0))" -v hz="$TICK" \
            -v pb="$(pg_used backends)" -v pa="$(pg_used autovacuum)" -v po="$(pg_used other)" \
            -v n="${n:-0}" -v w="$(echo "$t1 - $t0" | bc)" 'BEGIN {
          printf "drain %d jobs, collector alive %.2f s: CPU s (µs per job drained)\n", n, w;
          printf "  PostgreSQL (postmaster and all its processes)  %6.2f (%5.1f)\n", p / hz, n ? p / hz * 1e6 / n : 0;
          printf "    client backends (collector sessions)        %6.2f (%5.1f)\n", pb / hz, n ? pb / hz * 1e6 / n : 0;
          printf "    autovacuum workers                           %6.2f (%5.1f)\n", pa / hz, n ? pa / hz * 1e6 / n : 0;
          printf "    postmaster, walwriter, checkpointer, others  %6.2f (%5.1f)\n", po / hz, n ? po / hz * 1e6 / n : 0;
          printf "  collector                                      %6.2f (%5.1f)\n", c / hz, n ? c / hz * 1e6 / n : 0;
          printf "  bench subscriber (collector_bench process)     %6.2f (%5.1f)\n", b / hz, n ? b / hz * 1e6 / n : 0;
          printf "  total                                          %6.2f (%5.1f), of %.2f CPU s on 2 cores\n",
                 (p + c + b) / hz, n ? (p + c + b) / hz * 1e6 / n : 0, 2 * w }'
        [[ $STATEMENTS == 0 ]] || statement_summary "${n:-0}"
        [[ $PERF == 0 ]] || perf_summary
        cpid=""
      fi
    fi
    sleep 0.05
  done
  wait "$bpid" || true
  echo "--- collector_bench ${CPU_ARGS[*]}:"
  cat "$out"
}

if [[ $CPU_MODE == 1 ]]; then
  collector_cpu
  exit 0
fi

[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 20000 ]] || { echo "--jobs must be a number >= 20000 (>= 20 batches)" >&2; exit 2; }
[[ $FSYNC == on || $FSYNC == off ]] || { echo "--fsync must be on or off" >&2; exit 2; }
BATCHES=$((JOBS / 1000))
PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/initdb ]] || { echo "PostgreSQL 15 is not installed (apt-get install postgresql)" >&2; exit 1; }
AS_PG=()
[[ $(id -u) == 0 ]] && AS_PG=(runuser -u postgres --)

DIR=$(mktemp -d /tmp/lease-cost.XXXXXX)
PGSTARTED=0
cleanup() {
  [[ -z ${MEASURE_PID:-} ]] || kill "$MEASURE_PID" 2>/dev/null || true
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
[[ $NESTED == 1 ]] && DURABILITY+=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on"
PGSTARTED=1
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR $DURABILITY" start >/dev/null

# The measurement runs in the background so that Ctrl-C / SIGTERM reach the traps at once (bash
# runs a trap only after its foreground command ends); stopping PostgreSQL ends its psql.
measure() {
# The benchmark's statements play the application, which reaches mailroom's tables through its
# search path (docs/integration.md).
export PGOPTIONS="-c search_path=mailroom,public"
PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench"
PSQL+=(-d bench)

echo "PostgreSQL $("${PSQL[@]}" -tAc 'SHOW server_version'), fsync=$FSYNC" \
     "(fsync $("${PSQL[@]}" -tAc 'SHOW fsync'), synchronous_commit" \
     "$("${PSQL[@]}" -tAc 'SHOW synchronous_commit'), full_page_writes" \
     "$("${PSQL[@]}" -tAc 'SHOW full_page_writes')), $JOBS activations, $BATCHES batches of 1000," \
     "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

for f in $(ls migrations/[0-9]*.up.sql | sort); do
  "${PSQL[@]}" -1 -f "$f" >/dev/null
done
t0=$(date +%s.%N)
for ((done = 0; done < JOBS; done += 10000)); do
  "${PSQL[@]}" -c "INSERT INTO accounts (email, login) SELECT 'u' || i || '@bench.test', 'u' || i
                   FROM generate_series($((done + 1)), $(( done + 10000 < JOBS ? done + 10000 : JOBS ))) i"
done
"${PSQL[@]}" -c "VACUUM ANALYZE"
echo "queued $("${PSQL[@]}" -tAc "SELECT count(*) FROM tokens WHERE action = 'activation'") activations in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
"${PSQL[@]}" -f bench/lease_cost.sql >/dev/null
"${PSQL[@]}" -f bench/lease_cost_proto.sql >/dev/null

reset_tables() {
  "${PSQL[@]}" -c "TRUNCATE deliveries, lease_batches, delivery_counts, reputation_hourly,
                   group_usage, lease_proto.batches, lease_proto.exceptions"
}

# One psql session per client-timed run: every statement is preceded by an \echo of its step
# name, \timing prints its wall time (sent to result received, rows written to /dev/null);
# lines "@batch N", "@step NAME" and "Time: X ms" become rows of lease_cost.timings.
client_run() {  # run-name script-file
  local run=$1 script=$2 tsv
  tsv=$(mktemp "$DIR/timings.XXXXXX")
  "${PSQL[@]}" -f "$script" | awk -v run="$run" '
    /^@batch / { batch = $2; next }
    /^@jobs / { jobs[batch] = $2; next }
    /^@step / { step = substr($0, 7); next }
    /^Time: / { if (step != "") { n++; b[n] = batch; s[n] = step; ms[n] = $2 } step = ""; next }
    END { for (i = 1; i <= n; i++) printf "%s\t%s\t%d\t%d\t%s\n", run, s[i], b[i], jobs[b[i]], ms[i] }
  ' >"$tsv"
  "${PSQL[@]}" -c "\\copy lease_cost.timings FROM '$tsv'"
  "${PSQL[@]}" -c "INSERT INTO lease_cost.timings
                   SELECT run, 'TOTAL dequeue+ack+commits (all round trips)', batch, jobs, sum(ms)
                     FROM lease_cost.timings WHERE run = '$run' GROUP BY run, batch, jobs
                    ORDER BY batch"
}

# The dequeue transaction of batch $i as the collector sends it: BEGIN, SET LOCAL, the dequeue
# (rows to /dev/null), COMMIT.
client_dequeue() {  # step-name select
  cat <<EOF
\\echo @batch $i
\\echo @step BEGIN (dequeue)
BEGIN;
\\echo @step SET LOCAL synchronous_commit = off
SET LOCAL synchronous_commit = off;
\\echo @step $1
$2 \\g /dev/null
\\echo @step commit (dequeue, synchronous_commit off)
COMMIT;
EOF
}

current_client_script() {  # group
  local g=$1
  echo "SELECT mailroom_ensure_group('$g', true);"
  echo "SELECT id AS gid FROM consumer_groups WHERE name = '$g' \\gset"
  echo "\\timing on"
  for ((i = 1; i <= BATCHES; i++)); do
    client_dequeue "mailroom_dequeue (1000 rows to the client)" \
      "SELECT job_id, action = 'password_recovery', email, login, secret, code, expires_at,
              account_id, attempt, failures, created_at, locale
         FROM mailroom_dequeue('$g', 1000, 'bench-1', 60000)"
    cat <<EOF
SELECT array_agg(token_id)::TEXT AS ids, array_agg(attempts)::TEXT AS att, count(*) AS n,
       array_fill('sent'::TEXT, ARRAY[count(*)::INT])::TEXT AS kinds,
       array_fill(''::TEXT, ARRAY[count(*)::INT])::TEXT AS reasons,
       array_fill(0, ARRAY[count(*)::INT])::TEXT AS zeros
  FROM delivery_states WHERE group_id = :gid AND owner = 'bench-1' AND state = 'leased' \\gset
\\echo @jobs :n
\\echo @step BEGIN (acknowledgement)
BEGIN;
\\echo @step mailroom_ack (1000 SENT)
SELECT * FROM mailroom_ack('$g', 'bench-1', :'ids'::bigint[], :'att'::int[], :'kinds'::text[],
                           :'reasons'::text[], :'zeros'::int[], :'zeros'::bigint[]) \\g /dev/null
\\echo @step mailroom_record_sent
SELECT mailroom_record_sent('$g', :n, '{}'::bigint[], '{}'::text[]) \\g /dev/null
\\echo @step commit (acknowledgement)
COMMIT;
EOF
  done
  echo "\\timing off"
  # Every job must end SENT, or the figures are not those of a drain.
  echo "DO \$\$ BEGIN IF (SELECT count(*) FROM delivery_states WHERE state = 'sent' AND group_id =
        (SELECT id FROM consumer_groups WHERE name = '$g')) <> $JOBS THEN RAISE EXCEPTION 'client drain: not every job recorded SENT'; END IF; END \$\$;"
}

proto_client_script() {  # group
  local g=$1
  echo "SELECT lease_proto.start_group('$g') AS gid \\gset"
  echo "\\timing on"
  for ((i = 1; i <= BATCHES; i++)); do
    client_dequeue "lease_proto.dequeue (1000 rows to the client)" \
      "SELECT batch_id, job_id, action = 'password_recovery', email, login, secret, code,
              expires_at, account_id, attempt, failures, created_at, locale
         FROM lease_proto.dequeue(:gid, 1000, 'bench-1', 60000)"
    cat <<EOF
SELECT batch_id AS batch, ids::TEXT AS ids, n FROM lease_proto.batches
 WHERE group_id = :gid AND holder = 'bench-1' AND state = 'leased' \\gset
\\echo @jobs :n
\\echo @step BEGIN (acknowledgement)
BEGIN;
\\echo @step ack_batch (1000 SENT: one row update)
SELECT lease_proto.ack_batch(:gid, 'bench-1', :batch, 1, :'ids'::bigint[], 0) \\g /dev/null
\\echo @step commit (acknowledgement)
COMMIT;
EOF
  done
  echo "\\timing off"
  echo "DO \$\$ BEGIN IF (SELECT sum(acked) FROM lease_proto.batches WHERE state = 'done' AND group_id =
        (SELECT id FROM consumer_groups WHERE name = '$g')) <> $JOBS THEN
        RAISE EXCEPTION 'client prototype drain: not every job recorded'; END IF; END \$\$;"
}

# WAL written by one run, per job (the timings' own small insert included).
wal_mark() { WAL0=$("${PSQL[@]}" -tAc "SELECT pg_current_wal_lsn()"); }
wal_per_job() {
  WAL_NOTE="$1: $("${PSQL[@]}" -tAc "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$WAL0') / $JOBS)") WAL bytes per job"
}

summary() {  # run title
  echo
  echo "== $2"
  "${PSQL[@]}" -c "SELECT step, batches, median_ms AS \"median ms/1000\", min_ms AS \"min\",
                          max_ms AS \"max\", jobs_per_s AS \"jobs/s (median)\"
                     FROM lease_cost.summary('$1')"
  if [[ ${WAL_NOTE:-} == "$1:"* ]]; then echo "$WAL_NOTE"; fi
}

echo "deliveries: $("${PSQL[@]}" -tAc "SELECT count(*) FROM pg_index WHERE indrelid = 'deliveries'::regclass") indexes" \
     "($("${PSQL[@]}" -tAc "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_index i
                             JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'deliveries'::regclass")),"\
     "triggers: $("${PSQL[@]}" -tAc "SELECT string_agg(tgname, ', ') FROM pg_trigger WHERE tgrelid = 'deliveries'::regclass AND NOT tgisinternal")"
echo "lease_batches (0021: a first lease's dequeue and acknowledgement write these rows, not deliveries):" \
     "$("${PSQL[@]}" -tAc "SELECT count(*) FROM pg_index WHERE indrelid = 'lease_batches'::regclass") indexes" \
     "($("${PSQL[@]}" -tAc "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_index i
                             JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'lease_batches'::regclass"))"

reset_tables
wal_mark
[[ $NESTED == 0 ]] || "${PSQL[@]}" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
                                   -c "SELECT pg_stat_statements_reset()" >/dev/null
"${PSQL[@]}" -c "CALL lease_cost.current_path('a server', 'a_server', $BATCHES)"
wal_per_job "a server"
summary 'a server' "a. current path, timed inside PostgreSQL (clock_timestamp), fsync=$FSYNC"
if [[ $NESTED == 1 ]]; then
  echo
  echo "== a. inside it, per statement (pg_stat_statements, track = all; nested statements of the"
  echo "   dequeue and the acknowledgement included in their callers' lines too), ms per 1000-job batch"
  "${PSQL[@]}" -c "SELECT round((total_exec_time / $BATCHES)::NUMERIC, 3) AS \"exec ms per batch\",
                          round((total_plan_time / $BATCHES)::NUMERIC, 3) AS \"planning ms\",
                          calls, plans, left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
                     FROM pg_stat_statements
                    WHERE query NOT LIKE '%lease_cost.%' AND query NOT LIKE '%pg_stat_statements%'
                    ORDER BY total_exec_time + total_plan_time DESC LIMIT 16"
fi

reset_tables
current_client_script a_client >"$DIR/a_client.sql"
client_run 'a client' "$DIR/a_client.sql"
summary 'a client' "a. current path, wall time per statement from psql over TCP loopback, fsync=$FSYNC"

for v in "true false triggers, all indexes" "false false no triggers, all indexes" \
         "true true triggers, primary key only" "false true no triggers, primary key only"; do
  read -r trig only_pk label <<<"$v"
  reset_tables
  "${PSQL[@]}" -c "CALL lease_cost.steps('b $label', $BATCHES, $trig, $only_pk)"
  summary "b $label" "b. inside the dequeue/ack, each statement committed (commits not shown): $label; since 0021 the INSERT/UPDATE steps are the pre-0021 per-job writes, not part of a first lease's dequeue/ack"
done

for mode in full partial exceptions; do
  reset_tables
  wal_mark
  "${PSQL[@]}" -c "CALL lease_cost.proto_path('c server $mode', 'c_$mode', $BATCHES, '$mode')"
  wal_per_job "c server $mode"
  summary "c server $mode" "c. batch-lease prototype ($mode), timed inside PostgreSQL, fsync=$FSYNC"
done

reset_tables
proto_client_script c_client >"$DIR/c_client.sql"
client_run 'c client' "$DIR/c_client.sql"
summary 'c client' "c. batch-lease prototype (full), wall time per statement from psql over TCP loopback, fsync=$FSYNC"

echo
"${PSQL[@]}" -c "CALL lease_cost.proto_fencing_check()" 2>&1 | sed 's/^psql:[^ ]* //'
}
measure &
MEASURE_PID=$!
wait "$MEASURE_PID"
