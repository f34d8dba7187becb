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

source bench/throwaway_pg.sh
throwaway_pg signup-cost "$FSYNC" "$MIGRATIONS"
"${PSQL[@]}" -c "CREATE SEQUENCE bench_seq"

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
