#!/usr/bin/env bash
# What one email costs the application's PostgreSQL, stage by stage, beside the application's
# own signup insert. Measurement only, no timed assertion.
#
# Starts its own PostgreSQL 15 (bench/throwaway_pg.sh: temp dir, 127.0.0.1, stopped on exit)
# with mailroom's schema and one consumer group, then for --rounds rounds:
#   app        --emails signups with mailroom's triggers disabled: the application's own insert
#   trigger    the same signups with the triggers on, less `app`: what mailroom adds to the
#              application's transaction (the queued signup and the wake-up)
#   collect    the queued signups made tokens, 1,000 a call (mailroom_collect_signups)
#   dequeue    every token leased, 1,000 a call (mailroom_dequeue, as the collector calls it
#              for a subscriber without a budget holder)
#   ack        every lease acknowledged, 1,000 a call: mailroom_ack and mailroom_record_sent,
#              as collector/store/store.cc's Ack; with --retry=P, P % of each call's jobs are RETRY
#              (due at once), dequeued and acknowledged SENT again, in those same stages; with
#              --message-ids, every SENT carries a provider message id and the provider `ses`,
#              as an API provider's does (SMTP's and the file transport's carry none)
#   publish    the application's events (sent, ...) moved from their staging table into the
#              feed, 10,000 a call, as the collector's publisher (mailroom_publish_events; a
#              schema without the feed: 0)
#   retention  everything finished pruned as the collector's retention pass does, with the
#              retention window at 0, the tokens aged 30 days and a checkpoint taken first
#              (not timed) as days would (mailroom_prune_deliveries, _lease_batches, _tokens and
#              mailroom_compact_delivery_counts, mailroom_prune_address_requests with the
#              address counters aged as the tokens, and mailroom_prune_email_events with the
#              events' time set past their retention first, not timed), 1,000 a call
# Each stage runs in one session of its own, its calls committed one by one inside the server (a
# procedure) with synchronous_commit = off, so the figure is the work the server does, not the
# WAL flush it waits for nor the client's round trip. Per delivered email: the backend's CPU
# (utime + stime from /proc: the server's own accounting of the session) and the WAL bytes it
# wrote (pg_current_wal_insert_lsn), the median over rounds; autovacuum's later work is not in
# them. The table ends with mailroom's total (trigger to retention) and its ratio to `app`.
# With --by-relation, the last round's WAL of each stage (the first pass of dequeue and ack) is
# then shown per email by the table or index it changed (pg_walinspect), largest first; with
# --by-statement, its time by the statement inside mailroom's functions (pg_stat_statements).
#
# Usage: bash bench/email_cost.sh [--emails=20000] [--rounds=3] [--retry=0] [--fsync=on|off]
#                                 [--by-relation] [--by-statement] [--message-ids]
#                                 [--migrations=DIR]   (another schema, e.g. an older commit's:
#   git archive COMMIT migrations | tar -x -C /tmp/old && ... --migrations=/tmp/old/migrations)
set -euo pipefail
ROOT=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

EMAILS=20000
ROUNDS=3
RETRY=0
FSYNC=on
MIGRATIONS=migrations
BY_RELATION=0 BY_STATEMENT=0
MIDS=false PROVIDER=NULL
for a in "$@"; do
  case $a in
    --emails=*) EMAILS=${a#--emails=} ;;
    --rounds=*) ROUNDS=${a#--rounds=} ;;
    --retry=*) RETRY=${a#--retry=} ;;
    --fsync=*) FSYNC=${a#--fsync=} ;;
    --migrations=*) MIGRATIONS=${a#--migrations=} ;;
    --by-relation) BY_RELATION=1 ;;
    --by-statement) BY_STATEMENT=1 ;;
    --message-ids) MIDS=true PROVIDER="'ses'" ;;
    *) echo "email_cost.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ $FSYNC == on || $FSYNC == off ]] || { echo "--fsync must be on or off" >&2; exit 2; }
[[ $RETRY =~ ^[0-9]+$ ]] && ((RETRY < 100)) || { echo "--retry must be 0 to 99" >&2; exit 2; }

source bench/throwaway_pg.sh
if ((BY_STATEMENT)); then
  THROWAWAY_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
fi
throwaway_pg email-cost "$FSYNC" "$MIGRATIONS"
if ((BY_STATEMENT)); then
  "${PSQL[@]}" -c "CREATE EXTENSION pg_stat_statements"
fi
"${PSQL[@]}" -f bench/email_procedures.sql
"${PSQL[@]}" <<EOF
CREATE SEQUENCE bench_seq;
SELECT mailroom_ensure_group('bench', true);
-- The application's signups, one per transaction.
CREATE PROCEDURE bench_signups(p_n INT) LANGUAGE plpgsql AS \$\$
DECLARE
    n BIGINT;
BEGIN
    SET synchronous_commit = off;
    FOR i IN 1..p_n LOOP
        n := nextval('bench_seq');
        INSERT INTO accounts (email, login) VALUES ('u' || n || '@bench.test', 'u' || n);
        COMMIT;
    END LOOP;
END;
\$\$;
CREATE PROCEDURE bench_collect() LANGUAGE plpgsql AS \$\$
BEGIN
    SET synchronous_commit = off;
    WHILE mailroom_collect_signups(1000) > 0 LOOP
        COMMIT;
    END LOOP;
END;
\$\$;
-- Retention with a window of 0: what the collector's pass deletes once the window has passed.
CREATE PROCEDURE bench_retention() LANGUAGE plpgsql AS \$\$
DECLARE
    r RECORD;
    g INT := (SELECT id FROM consumer_groups WHERE name = 'bench');
    after BIGINT;
    later TIMESTAMPTZ := now() + interval '1 day';
BEGIN
    SET synchronous_commit = off;
    after := 0;
    LOOP
        SELECT * INTO r FROM mailroom_prune_deliveries(g, after, later, 1000);
        COMMIT;
        EXIT WHEN NOT r.more;
        after := r.last_id;
    END LOOP;
    after := 0;
    LOOP
        SELECT * INTO r FROM mailroom_prune_lease_batches(after, later, 1000);
        COMMIT;
        EXIT WHEN NOT r.more;
        after := r.last_id;
    END LOOP;
    after := 0;
    LOOP
        SELECT * INTO r FROM mailroom_prune_tokens(after, extract(epoch FROM later)::BIGINT, 1000);
        COMMIT;
        EXIT WHEN NOT r.more;
        after := r.last_id;
    END LOOP;
    PERFORM mailroom_compact_delivery_counts();
    COMMIT;
    after := 0;
    LOOP
        SELECT * INTO r FROM mailroom_prune_address_requests(after, 1000);
        COMMIT;
        EXIT WHEN NOT r.more;
        after := r.next_after;
    END LOOP;
    CALL bench_prune_events();
END;
\$\$;
EOF

triggers() {
  "${PSQL[@]}" -c "ALTER TABLE accounts $1 TRIGGER before_account_insert;
                   ALTER TABLE mailroom_signups $1 TRIGGER after_signup_inserted;"
}
STAGES=(app trigger collect dequeue ack publish retention)
declare -A CPU WAL WHERE TIME
# Keeps where stage $1's WAL (timed's output $2) and time went, in the last round.
where() {
  # The statements first: reading the WAL back waits for its flush in statements of its own.
  if ((BY_STATEMENT && r == ROUNDS)) && [[ -z ${TIME[$1]:-} ]]; then
    TIME[$1]=$(time_by_statement "$EMAILS")
  fi
  if ((BY_RELATION && r == ROUNDS)) && [[ -z ${WHERE[$1]:-} ]]; then
    WHERE[$1]=$(wal_by_relation "$2" "$EMAILS")
  fi
  reset_statements
}
# The next stage's statements counted from here.
reset_statements() {
  if ((BY_STATEMENT)); then "${PSQL[@]}" -tAc "SELECT FROM pg_stat_statements_reset()"; fi
}
for ((r = 1; r <= ROUNDS; r++)); do
  triggers DISABLE
  reset_statements
  out=$(timed "CALL bench_signups($EMAILS)")
  where app "$out"
  app_cpu=$(cpu_per_row "$out" "$EMAILS") app_wal=$(wal_per_row "$out" "$EMAILS")
  CPU[app]+="$app_cpu " WAL[app]+="$app_wal "
  triggers ENABLE
  out=$(timed "CALL bench_signups($EMAILS)")
  where trigger "$out"
  CPU[trigger]+="$(echo "$(cpu_per_row "$out" "$EMAILS") - $app_cpu" | bc -l | xargs printf '%.1f') "
  WAL[trigger]+="$(($(wal_per_row "$out" "$EMAILS") - app_wal)) "
  out=$(timed "CALL bench_collect()")
  where collect "$out"
  CPU[collect]+="$(cpu_per_row "$out" "$EMAILS") " WAL[collect]+="$(wal_per_row "$out" "$EMAILS") "
  dq_cpu=0 dq_wal=0 ack_cpu=0 ack_wal=0
  # A first pass over every job, then the retried ones (due at once) until none is left.
  while :; do
    out=$(timed "CALL bench_dequeue()")
    where dequeue "$out"
    n=$("${PSQL[@]}" -tAc "SELECT count(*) FROM bench_leased")
    ((n > 0)) || break
    dq_cpu=$(echo "$dq_cpu + $(cpu_per_row "$out" "$EMAILS")" | bc -l)
    dq_wal=$((dq_wal + $(wal_per_row "$out" "$EMAILS")))
    out=$(timed "CALL bench_ack($RETRY, $MIDS, $PROVIDER)")
    where ack "$out"
    ack_cpu=$(echo "$ack_cpu + $(cpu_per_row "$out" "$EMAILS")" | bc -l)
    ack_wal=$((ack_wal + $(wal_per_row "$out" "$EMAILS")))
  done
  sent=$("${PSQL[@]}" -tAc "SELECT count(*) FROM delivery_states WHERE state = 'sent'")
  [[ $sent == "$EMAILS" ]] || { echo "round $r: $sent of $EMAILS emails sent" >&2; exit 1; }
  CPU[dequeue]+="$(printf '%.1f' "$dq_cpu") " WAL[dequeue]+="$dq_wal "
  CPU[ack]+="$(printf '%.1f' "$ack_cpu") " WAL[ack]+="$ack_wal "
  out=$(timed "CALL bench_publish()")
  where publish "$out"
  CPU[publish]+="$(cpu_per_row "$out" "$EMAILS") " WAL[publish]+="$(wal_per_row "$out" "$EMAILS") "
  # The tokens made old enough for retention (past their expiry and the limits' window) and the
  # events past theirs, then a checkpoint, as days later: the deletes then write their pages'
  # first images again.
  "${PSQL[@]}" -c "UPDATE tokens SET created_at = created_at - 30 * 86400,
                                     expires_at = expires_at - 30 * 86400" \
    -c "UPDATE mailroom_address_requests
           SET times = ARRAY(SELECT x - 30 * 86400 FROM unnest(times) x)" \
    -c "DO \$\$ BEGIN IF to_regclass('mailroom.email_events') IS NOT NULL THEN
          UPDATE email_events SET at = at - interval '30 days'; END IF; END \$\$" -c "CHECKPOINT"
  reset_statements  # not the aging above
  out=$(timed "CALL bench_retention()")
  where retention "$out"
  left=$("${PSQL[@]}" -tAc "SELECT (SELECT count(*) FROM tokens) + (SELECT count(*) FROM delivery_states)
                               + (SELECT count(*) FROM mailroom_address_requests)")
  [[ $left == 0 ]] || { echo "round $r: retention left $left rows" >&2; exit 1; }
  CPU[retention]+="$(cpu_per_row "$out" "$EMAILS") " WAL[retention]+="$(wal_per_row "$out" "$EMAILS") "
  "${PSQL[@]}" -c "TRUNCATE accounts CASCADE" -c "VACUUM ANALYZE" -c "CHECKPOINT"
done

echo
echo "per delivered email, $EMAILS emails, $RETRY % retried once, message ids $MIDS, one call per transaction" \
     "(synchronous_commit=off), median of $ROUNDS rounds: the backend's CPU and the WAL written"
printf '%-10s %10s %10s   %-28s %s\n' stage 'CPU µs' 'WAL bytes' 'CPU runs' 'WAL runs'
total_cpu=0 total_wal=0
for s in "${STAGES[@]}"; do
  c=$(echo "${CPU[$s]}" | median) w=$(echo "${WAL[$s]}" | median)
  printf '%-10s %10s %10s   %-28s %s\n' "$s" "$c" "$w" "${CPU[$s]}" "${WAL[$s]}"
  if [[ $s != app ]]; then
    total_cpu=$(echo "$total_cpu + $c" | bc -l) total_wal=$((total_wal + w))
  fi
done
app_c=$(echo "${CPU[app]}" | median) app_w=$(echo "${WAL[app]}" | median)
printf '%-10s %10.1f %10s   (%.2fx the application'"'"'s insert in CPU, %.2fx in WAL)\n' mailroom \
  "$total_cpu" "$total_wal" "$(echo "$total_cpu / $app_c" | bc -l)" "$(echo "$total_wal / $app_w" | bc -l)"
if ((BY_RELATION)); then
  echo
  echo "where each stage's WAL went in round $ROUNDS, bytes per email (of them full page images)" \
       "by the relation changed and the record's kind; 'trigger' is the whole signup with" \
       "mailroom's triggers on"
  echo "(the records' own bytes: their sum is a little below the stage's WAL, which also counts" \
       "page headers and alignment)"
  for s in "${STAGES[@]}"; do
    echo "$s:"
    echo "${WHERE[$s]:-}" | awk 'NF {printf "  %6s %6s  %s\n", $1, $2, $3}'
  done
fi
if ((BY_STATEMENT)); then
  echo
  echo "where each stage's time went in round $ROUNDS: the statements run inside mailroom's" \
       "functions (and the benchmark's procedures), µs of execution per email and calls per email" \
       "(pg_stat_statements, track = all: a statement's time includes the statements it runs;" \
       "the tracking itself slows every stage)"
  for s in "${STAGES[@]}"; do
    echo "$s:"
    echo "${TIME[$s]:-}" | awk 'NF {u = $1; c = $2; $1 = $2 = ""; printf "  %7s %7s %s\n", u, c, $0}'
  done
fi
