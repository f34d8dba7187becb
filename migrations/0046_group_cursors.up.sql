-- The dequeue's cursors in a table of their own: one row per group and priority class
-- (group_cursors) instead of twelve columns of consumer_groups (prev_snapshot, cur_snapshot,
-- pos_txid and pos_id, with rec_* for the critical class and notice_* for notices). A row is
-- the class's window: its lower snapshot (prev_snapshot), its upper one while the window is
-- being read (cur_snapshot) and the last token read in it (pos_txid, pos_id). Every group has
-- its three rows from its creation (mailroom_ensure_group); a class's cursor that had never
-- moved (rec_* or notice_* NULL: the dequeue copied the normal class's at its first call) gets
-- the normal class's, as that call would have. Only the dequeue writes them, under its group's
-- row lock (docs/design.md, "The dequeue in parts").
--
-- The new mailroom_dequeue and its parts are sources, applied in the transaction that follows
-- the migrations in the same MigrateUp: between the two commits (milliseconds) a running
-- collector's dequeue fails on the dropped columns, rolls back and is retried by its
-- dispatcher, so nothing is lost or handed out twice.
--
-- dequeue_token: one token as a window's pass reads it (mailroom_dequeue_scan), for the
-- dequeue's parts to hand each other a window whole.
CREATE TABLE mailroom.group_cursors (
    group_id integer NOT NULL REFERENCES mailroom.consumer_groups (id) ON DELETE CASCADE,
    priority mailroom.action_priority NOT NULL,
    prev_snapshot pg_snapshot NOT NULL,
    cur_snapshot pg_snapshot,
    pos_txid xid8,
    pos_id bigint,
    PRIMARY KEY (group_id, priority)
);

INSERT INTO mailroom.group_cursors (group_id, priority, prev_snapshot, cur_snapshot, pos_txid,
                                    pos_id)
SELECT g.id, k.priority, k.prev, k.cur, k.pos_txid, k.pos_id
  FROM mailroom.consumer_groups g
 CROSS JOIN LATERAL (
       VALUES ('normal'::mailroom.action_priority, g.prev_snapshot, g.cur_snapshot, g.pos_txid,
               g.pos_id),
              ('critical', coalesce(g.rec_prev_snapshot, g.prev_snapshot),
               CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                    ELSE g.rec_cur_snapshot END,
               CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid ELSE g.rec_pos_txid END,
               CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id ELSE g.rec_pos_id END),
              ('notice', coalesce(g.notice_prev_snapshot, g.prev_snapshot),
               CASE WHEN g.notice_prev_snapshot IS NULL THEN g.cur_snapshot
                    ELSE g.notice_cur_snapshot END,
               CASE WHEN g.notice_prev_snapshot IS NULL THEN g.pos_txid
                    ELSE g.notice_pos_txid END,
               CASE WHEN g.notice_prev_snapshot IS NULL THEN g.pos_id
                    ELSE g.notice_pos_id END)) AS k(priority, prev, cur, pos_txid, pos_id);

ALTER TABLE mailroom.consumer_groups
    DROP COLUMN prev_snapshot, DROP COLUMN cur_snapshot, DROP COLUMN pos_txid,
    DROP COLUMN pos_id, DROP COLUMN rec_prev_snapshot, DROP COLUMN rec_cur_snapshot,
    DROP COLUMN rec_pos_txid, DROP COLUMN rec_pos_id, DROP COLUMN notice_prev_snapshot,
    DROP COLUMN notice_cur_snapshot, DROP COLUMN notice_pos_txid, DROP COLUMN notice_pos_id;

CREATE TYPE mailroom.dequeue_token AS (
    id bigint,
    txid xid8,
    action text,
    email text,
    login text,
    secret bytea,
    code text,
    expires_at bigint,
    account bigint,
    created_at bigint,
    locale text,
    -- NULL: to hand out; else why not (superseded, rate_limited, expired, consumed,
    -- suppressed, or the account's status), with the reason to record.
    skip text,
    reason text
);
