-- Records the jobs at p_slots (1-based, from mailroom_batch_match under its lock) of the lease
-- batches p_batches (parallel): sets their done bits, and their kept bits where p_kept (the
-- caller inserts their deliveries rows). Called by mailroom_ack, mailroom_release and
-- mailroom_batch_unpack. One row update per batch; a batch whose every job is recorded becomes
-- done, all its bits set at once.
CREATE OR REPLACE FUNCTION mailroom.mailroom_batch_record(p_batches bigint[], p_slots integer[], p_kept boolean[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT x.b, array_agg(x.s) AS slots, array_agg(x.s) FILTER (WHERE x.k) AS kept
               FROM unnest(p_batches, p_slots, p_kept) AS x(b, s, k) GROUP BY x.b
    LOOP
        UPDATE lease_batches b
           SET done = CASE WHEN b.acked + cardinality(r.slots) >= length(b.done)
                           THEN repeat('1', length(b.done))::VARBIT
                           ELSE b.done | mailroom_bits(length(b.done), r.slots) END,
               kept = CASE WHEN r.kept IS NULL THEN b.kept
                           ELSE b.kept | mailroom_bits(length(b.done), r.kept) END,
               acked = b.acked + cardinality(r.slots),
               state = CASE WHEN b.acked + cardinality(r.slots) >= length(b.done) THEN 'done'
                            ELSE 'leased' END,
               updated_at = now()
         WHERE b.batch_id = r.b;
    END LOOP;
END;
$$;
