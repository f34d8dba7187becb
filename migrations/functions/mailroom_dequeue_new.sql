-- Step 2 of mailroom_dequeue for class p_class of group p_group_id (its row lock held): leases
-- to p_owner until p_due up to p_limit new tokens of the class, window by window on the class's
-- row of group_cursors, and returns them. A window's new tokens are those of the transactions
-- in progress at its lower snapshot that committed by its upper one (each a segment: one txid,
-- probed), then those from the lower snapshot's xmax up, as PgQ reads a batch: never the range
-- from its xmin, which a transaction open anywhere in the cluster holds back (docs/design.md,
-- "The queue follows snapshots, not ids"). Each stretch is read by mailroom_dequeue_scan and
-- leased by mailroom_dequeue_claim. At most one fresh window per call; the row is written only
-- when the cursor moved.
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_new(p_group_id integer, p_class mailroom.action_priority, p_limit integer, p_owner text, p_due timestamp with time zone, p_names text[], p_needed mailroom.account_status[]) RETURNS SETOF mailroom.dequeue_token
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    c          group_cursors%ROWTYPE;
    v_left     INT := p_limit;
    v_opened   BOOLEAN := FALSE;
    v_seek     BOOLEAN := FALSE;
    v_moved    BOOLEAN := FALSE;
    v_found    INT := 0;
    v_seg      XID8;
    v_hi       XID8;
    v_rows     dequeue_token[];
    v_count    INT;
    v_returned INT;
BEGIN
    SELECT * INTO c FROM group_cursors WHERE group_id = p_group_id AND priority = p_class;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer group % has no cursor for class %', p_group_id, p_class;
    END IF;
    WHILE v_left > 0 LOOP
        IF c.cur_snapshot IS NULL THEN
            EXIT WHEN v_opened;
            c.cur_snapshot := pg_current_snapshot();
            c.pos_txid := NULL;
            v_opened := TRUE;
            v_seek := TRUE;
            v_found := 0;
        END IF;
        IF v_seek THEN
            -- The segment at or after pos_txid (NULL: the window's first) with tokens of the
            -- class, else the lower snapshot's xmax: a probe per transaction (OFFSET 0).
            SELECT min(x.x) INTO v_seg FROM pg_snapshot_xip(c.prev_snapshot) x
             WHERE (c.pos_txid IS NULL OR x.x >= c.pos_txid)
               AND pg_visible_in_snapshot(x.x, c.cur_snapshot)
               AND EXISTS (SELECT 1 FROM tokens t
                            WHERE t.priority = p_class AND t.txid = x.x OFFSET 0);
            c.pos_txid := coalesce(v_seg, pg_snapshot_xmax(c.prev_snapshot));
            c.pos_id := 0;
            v_seek := FALSE;
        END IF;
        IF c.pos_txid < pg_snapshot_xmax(c.prev_snapshot) THEN
            v_seg := c.pos_txid; v_hi := (c.pos_txid::TEXT::BIGINT + 1)::TEXT::XID8;
        ELSE
            v_seg := NULL; v_hi := pg_snapshot_xmax(c.cur_snapshot);
        END IF;
        SELECT array_agg(s) INTO v_rows
          FROM mailroom_dequeue_scan(p_class, c.pos_txid, c.pos_id, v_hi, c.prev_snapshot,
                                     c.cur_snapshot, v_left, p_names, p_needed) s;
        v_count := coalesce(cardinality(v_rows), 0);
        v_returned := 0;
        IF v_count > 0 THEN
            RETURN QUERY SELECT * FROM mailroom_dequeue_claim(p_group_id, p_class, p_owner, p_due,
                                                              v_rows);
            GET DIAGNOSTICS v_returned = ROW_COUNT;
        END IF;
        v_found := v_found + v_count;
        IF v_count < v_left AND v_seg IS NOT NULL THEN
            -- A transaction's segment read whole: the window goes on at the next one.
            c.pos_txid := (v_seg::TEXT::BIGINT + 1)::TEXT::XID8;
            v_seek := TRUE;
            v_moved := v_moved OR v_count > 0;
        ELSIF v_count = 0 AND v_opened AND v_found = 0 THEN
            -- A fresh window without a token of this class: the lower bound stays.
            c.cur_snapshot := NULL; c.pos_txid := NULL; c.pos_id := NULL;
        ELSIF v_count < v_left THEN
            -- Window exhausted: its upper snapshot becomes the lower bound.
            c.prev_snapshot := c.cur_snapshot;
            c.cur_snapshot := NULL; c.pos_txid := NULL; c.pos_id := NULL;
            v_moved := TRUE;
        ELSE
            c.pos_txid := (v_rows[v_count]).txid; c.pos_id := (v_rows[v_count]).id;
            v_moved := TRUE;
        END IF;
        v_left := v_left - v_returned;
    END LOOP;
    IF v_moved THEN
        UPDATE group_cursors
           SET prev_snapshot = c.prev_snapshot, cur_snapshot = c.cur_snapshot,
               pos_txid = c.pos_txid, pos_id = c.pos_id
         WHERE group_id = p_group_id AND priority = p_class;
    END IF;
END;
$$;
