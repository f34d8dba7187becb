#!/usr/bin/env bash
# What the application's event feed adds to one sent email in the application's PostgreSQL.
# Measurement only, no timed assertion.
#
# Starts its own PostgreSQL 15 (bench/throwaway_pg.sh: temp dir, 127.0.0.1, stopped on exit)
# with mailroom's schema and one consumer group, then for --rounds rounds, each over --emails
# fresh tokens (accounts and tokens inserted in one statement, not measured), twice: once with
# email_events_staged and email_events_staged_sent (the plain SENTs, packed) replaced by
# unlogged tables of the same names (`off`: the staged events write no WAL, so the difference is
# their WAL; the CPU of both is alike) and once as shipped:
#   ack        every token leased (mailroom_dequeue, 1,000 a call, not measured) and every
#              lease acknowledged SENT, 1,000 a call (mailroom_ack and mailroom_record_sent, as
#              collector/store/store.cc's Ack); with --message-ids each outcome carries a provider
#              message id (kept rows: the deliveries trigger stages the events)
#   publish    the staged events moved into the feed, 10,000 a call (mailroom_publish_events,
#              as the collector's publisher), with its NOTIFY
#   prune      the feed's events deleted as the retention pass does, after their `at` was set
#              8 days back and a checkpoint taken (neither measured), 1,000 a call
#              (mailroom_prune_email_events)
# Each stage runs in a session of its own, its calls committed one by one inside the server (a
# procedure) with synchronous_commit = off. Per email: the WAL bytes the session wrote
# (pg_current_wal_insert_lsn) and the backend's CPU (utime + stime from /proc), median over
# rounds; the events' WAL is ack (shipped) - ack (off) + publish + prune.
#
# Usage: bash bench/event_cost.sh [--emails=20000] [--rounds=3] [--message-ids] [--fsync=on|off]
#                                 [--migrations=DIR]   (another schema, e.g. an older commit's:
#   git archive COMMIT migrations | tar -x -C /tmp/old && ... --migrations=/tmp/old/migrations)
set -euo pipefail
ROOT=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

EMAILS=20000
ROUNDS=3
MIDS=0
FSYNC=on
MIGRATIONS=migrations
for a in "$@"; do
  case $a in
    --emails=*) EMAILS=${a#--emails=} ;;
    --rounds=*) ROUNDS=${a#--rounds=} ;;
    --message-ids) MIDS=1 ;;
    --fsync=*) FSYNC=${a#--fsync=} ;;
    --migrations=*) MIGRATIONS=${a#--migrations=} ;;
    *) echo "event_cost.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ $FSYNC == on || $FSYNC == off ]] || { echo "--fsync must be on or off" >&2; exit 2; }

source bench/throwaway_pg.sh
throwaway_pg event-cost "$FSYNC" "$MIGRATIONS"
# The staging tables of this schema (email_events_staged_sent: from 0050), and the events they hold.
STAGING=(email_events_staged)
[[ $("${PSQL[@]}" -tAc "SELECT to_regclass('email_events_staged_sent') IS NOT NULL") == t ]] &&
  STAGING+=(email_events_staged_sent)
STAGED="SELECT (SELECT count(*) FROM email_events_staged)"
((${#STAGING[@]} > 1)) &&
  STAGED+=" + (SELECT coalesce(sum(cardinality(token_ids)), 0) FROM email_events_staged_sent)"

"${PSQL[@]}" -f bench/email_procedures.sql
"${PSQL[@]}" <<EOF
CREATE SEQUENCE bench_seq;
SELECT mailroom_ensure_group('bench', true);
EOF

# --emails active accounts, one password_recovery token each (not measured), leased.
tokens() {
  "${PSQL[@]}" -c "INSERT INTO accounts (email, login, status)
                   SELECT 'u' || n || '@bench.test', 'u' || n, 'active'
                     FROM (SELECT nextval('bench_seq') AS n FROM generate_series(1, $EMAILS)) s" \
               -c "INSERT INTO tokens (account, action)
                   SELECT id, 'password_recovery' FROM accounts
                    WHERE NOT EXISTS (SELECT 1 FROM tokens t WHERE t.account = accounts.id)" \
               -c "VACUUM ANALYZE" -c "CALL bench_dequeue()" -c "CHECKPOINT"
}
mids=false
((MIDS)) && mids=true
declare -A CPU WAL
for ((r = 1; r <= ROUNDS; r++)); do
  tokens
  for t in "${STAGING[@]}"; do
    "${PSQL[@]}" -c "ALTER TABLE $t RENAME TO bench_$t" \
                 -c "CREATE UNLOGGED TABLE $t (LIKE bench_$t INCLUDING DEFAULTS)"
  done
  out=$(timed "CALL bench_ack(0, $mids, 'smtp')")
  CPU[off]+="$(cpu_per_row "$out" "$EMAILS") " WAL[off]+="$(wal_per_row "$out" "$EMAILS") "
  for t in "${STAGING[@]}"; do
    "${PSQL[@]}" -c "DROP TABLE $t" -c "ALTER TABLE bench_$t RENAME TO $t"
  done
  tokens
  out=$(timed "CALL bench_ack(0, $mids, 'smtp')")
  CPU[ack]+="$(cpu_per_row "$out" "$EMAILS") " WAL[ack]+="$(wal_per_row "$out" "$EMAILS") "
  staged=$("${PSQL[@]}" -tAc "$STAGED")
  [[ $staged == "$EMAILS" ]] || { echo "round $r: $staged events staged for $EMAILS emails" >&2; exit 1; }
  out=$(timed "CALL bench_publish()")
  CPU[publish]+="$(cpu_per_row "$out" "$EMAILS") " WAL[publish]+="$(wal_per_row "$out" "$EMAILS") "
  "${PSQL[@]}" -c "UPDATE email_events SET at = at - interval '8 days'" -c "CHECKPOINT"
  out=$(timed "CALL bench_prune_events()")
  CPU[prune]+="$(cpu_per_row "$out" "$EMAILS") " WAL[prune]+="$(wal_per_row "$out" "$EMAILS") "
  left=$("${PSQL[@]}" -tAc "$STAGED + (SELECT count(*) FROM email_events)")
  [[ $left == 0 ]] || { echo "round $r: $left events left" >&2; exit 1; }
  "${PSQL[@]}" -c "TRUNCATE accounts CASCADE" -c "VACUUM ANALYZE" -c "CHECKPOINT"
done

echo
echo "per sent email, $EMAILS emails, message ids $mids, one call per transaction" \
     "(synchronous_commit=off), median of $ROUNDS rounds: the backend's CPU and the WAL written"
printf '%-22s %10s %10s   %-28s %s\n' stage 'CPU µs' 'WAL bytes' 'CPU runs' 'WAL runs'
for s in off ack publish prune; do
  printf '%-22s %10s %10s   %-28s %s\n' "$s" "$(echo "${CPU[$s]}" | median)" \
    "$(echo "${WAL[$s]}" | median)" "${CPU[$s]}" "${WAL[$s]}"
done
w_off=$(echo "${WAL[off]}" | median)
w_ack=$(echo "${WAL[ack]}" | median)
c_pub=$(echo "${CPU[publish]}" | median) w_pub=$(echo "${WAL[publish]}" | median)
c_pr=$(echo "${CPU[prune]}" | median) w_pr=$(echo "${WAL[prune]}" | median)
printf '%-22s %10.1f %10s   (CPU: publish + prune; WAL: ack - off + publish + prune)\n' \
  "events" "$(echo "$c_pub + $c_pr" | bc -l)" "$((w_ack - w_off + w_pub + w_pr))"
