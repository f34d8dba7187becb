-- The busy mark of the wake-up (docs/design.md, "Wake-up"): the token trigger
-- (functions/trg_after_token_inserted.sql) NOTIFYs only while some collector is idle, and
-- collectors set the mark through functions/mailroom_collector_mark.sql.
--
-- The mark the trigger reads is a sequence's value: the number of idle collectors. A sequence
-- is read outside MVCC (its current value, whatever the reader's snapshot), so a REPEATABLE
-- READ or SERIALIZABLE transaction sees a change made after its snapshot was taken. Reading it
-- costs the trigger a fast-path relation lock and one buffer; no row is written, no lock held.

CREATE SEQUENCE mailroom_idle_collectors MINVALUE 0 START WITH 0;

-- One row per collector, by the pid of its LISTEN connection: the count above is recomputed
-- from these rows, and rows of connections that are gone are dropped on every change.
CREATE TABLE mailroom_collectors (
    pid  INT PRIMARY KEY,
    idle BOOLEAN NOT NULL
);

-- The token trigger reads the mark as whoever inserts the token: an application role that has
-- only USAGE on sequences must be able to read it. The count of idle collectors is no secret.
GRANT SELECT ON SEQUENCE mailroom_idle_collectors TO PUBLIC;
