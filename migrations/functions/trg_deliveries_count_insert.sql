-- Counts the outcomes of inserted deliveries rows in delivery_counts (one delta row per group
-- and state; mailroom_compact_delivery_counts folds them). Fired once per INSERT statement on
-- deliveries (transition table).
CREATE OR REPLACE FUNCTION mailroom.trg_deliveries_count_insert() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT r.group_id, r.state, count(*) FROM new_rows r
     WHERE mailroom_finished_state(r.state)
     GROUP BY r.group_id, r.state;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_insert AFTER INSERT ON mailroom.deliveries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_insert();
