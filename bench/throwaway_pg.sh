# Sourced by the benchmarks that measure mailroom's work inside PostgreSQL (signup_cost.sh,
# email_cost.sh): a throwaway PostgreSQL 15 with mailroom's schema, and the helpers that read
# a session's CPU and WAL. Measurement only.
#
# throwaway_pg NAME FSYNC MIGRATIONS starts a server in a temp dir (127.0.0.1 on a free port and
# a socket in the dir, PostgreSQL's default settings; FSYNC=off turns fsync, synchronous_commit
# and full_page_writes off; THROWAWAY_PG_OPTIONS adds server options), stopped and removed on exit, Ctrl-C or SIGTERM; creates the database
# `bench`; applies MIGRATIONS/*.up.sql in order, then the function and view sources (as
# `collector migrate` does); sets DIR, PORT, PSQL (psql as postgres on `bench`, stopping at the
# first error, search path mailroom then public, as the application has it) and TICK.

PGBIN=/usr/lib/postgresql/15/bin
AS_PG=()
[[ $(id -u) == 0 ]] && AS_PG=(runuser -u postgres --)

throwaway_pg() {
  local name=$1 fsync=$2 migrations=$3 f durability=""
  [[ -x $PGBIN/initdb ]] || { echo "PostgreSQL 15 is not installed (apt-get install postgresql)" >&2; exit 1; }
  DIR=$(mktemp -d "/tmp/$name.XXXXXX")
  PGSTARTED=0
  trap throwaway_pg_stop EXIT
  trap 'exit 130' INT TERM
  [[ $(id -u) == 0 ]] && chown postgres:postgres "$DIR"
  "${AS_PG[@]}" "$PGBIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
    --no-sync >/dev/null
  PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  [[ $fsync == off ]] && durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  PGSTARTED=1
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR $durability ${THROWAWAY_PG_OPTIONS:-}" \
    start >/dev/null
  export PGOPTIONS="-c search_path=mailroom,public"
  PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
  "${PSQL[@]}" -d postgres -c "CREATE DATABASE bench"
  PSQL+=(-d bench)
  "${PSQL[@]}" -c "CREATE SCHEMA IF NOT EXISTS mailroom"
  for f in $(ls "$migrations"/[0-9]*.up.sql | sort); do
    "${PSQL[@]}" -1 -f "$f" >/dev/null
  done
  if [[ -d $migrations/functions ]]; then
    cat <(echo "SET check_function_bodies = off;") "$migrations"/functions/*.sql \
        "$migrations"/views/*.sql | "${PSQL[@]}" -1 >/dev/null
  fi
  TICK=$(getconf CLK_TCK)
  echo "PostgreSQL $("${PSQL[@]}" -tAc 'SHOW server_version'), fsync $("${PSQL[@]}" -tAc 'SHOW fsync')," \
       "max_locks_per_transaction $("${PSQL[@]}" -tAc 'SHOW max_locks_per_transaction')," \
       "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

throwaway_pg_stop() {
  if [[ ${PGSTARTED:-0} == 1 ]]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  [[ -n ${DIR:-} ]] && rm -rf "$DIR"
}

# Runs statements $1 in a session of its own between two reads of its backend's CPU time (utime
# + stime from /proc, lines "cpu"): on a loaded machine the wall time mostly measures waiting
# for a core. Then the WAL written meanwhile, in bytes, and where it starts and ends (line
# "wal BYTES LSN0 LSN1"; the server runs nothing else but its own background processes). Prints
# psql's output.
timed() {
  "${PSQL[@]}" -tA <<EOF
SELECT pg_backend_pid() AS pid, pg_current_wal_insert_lsn() AS wal0 \\gset
\\setenv BPID :pid
\\! awk '{print "cpu", \$14 + \$15}' /proc/\$BPID/stat
$1;
\\! awk '{print "cpu", \$14 + \$15}' /proc/\$BPID/stat
SELECT 'wal ' || pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'wal0') || ' ' || :'wal0' || ' '
       || pg_current_wal_insert_lsn();
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
# Where the WAL of timed's output $1 went, per row for $2 rows: the bytes of its records (and of
# them full page images) by the relation they change and the kind of record (Heap/INSERT,
# Btree/INSERT_LEAF, Transaction/COMMIT, ...), largest first, read back with pg_walinspect. Run it before a checkpoint can
# recycle that WAL.
wal_by_relation() {
  local range
  range=$(echo "$1" | awk '/^wal/ {print $3, $4}')
  "${PSQL[@]}" -tA -F ' ' -v lsn0="${range% *}" -v lsn1="${range#* }" -v n="$2" <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
-- pg_walinspect reads only flushed WAL: the WAL writer flushes what asynchronous commits left.
SELECT FROM set_config('bench.lsn1', :'lsn1', false);
DO $$ BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN pg_current_wal_flush_lsn() >= current_setting('bench.lsn1')::pg_lsn;
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT round(sum(w.record_length)::numeric / :n) AS bytes,
       round(sum(w.fpi_length)::numeric / :n) AS fpi,
       coalesce(c.relname || ':', '') || w.resource_manager || '/'
       || split_part(w.record_type, ' ', 1) AS what
  FROM pg_get_wal_records_info(:'lsn0', :'lsn1') w
  LEFT JOIN pg_class c
    ON c.relfilenode = nullif(substring(w.block_ref FROM 'rel \d+/\d+/(\d+)'), '')::oid
 GROUP BY 3 HAVING sum(w.record_length + w.fpi_length) >= :n ORDER BY 1 DESC;
EOF
}
# The median of the numbers on stdin (separated by spaces or lines).
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
# Where the backend's time went between pg_stat_statements_reset() and now, per row for $1 rows:
# the statements run inside functions and procedures (nested), by their total execution time,
# largest first, with their calls per row. Needs THROWAWAY_PG_OPTIONS with
# shared_preload_libraries=pg_stat_statements and pg_stat_statements.track=all.
time_by_statement() {
  "${PSQL[@]}" -tA -F ' ' -v n="$1" <<'EOF'
SELECT round((sum(total_exec_time) * 1000 / :n)::numeric, 1) AS us,
       round(sum(calls)::numeric / :n, 3) AS calls,
       regexp_replace(left(min(query), 110), '\s+', ' ', 'g') AS statement
  FROM pg_stat_statements
 WHERE NOT toplevel AND query !~* '^(COMMIT|SET |SELECT pg_stat_statements)'
 GROUP BY queryid HAVING sum(total_exec_time) * 1000 / :n >= 0.5 ORDER BY 1 DESC LIMIT 12;
EOF
}
