-- Grows the pool of wrong-code counters (code_counters, one sequence mailroom_code_attempts_<n>
-- each) so that at least a quarter of it, and at least 64 counters, are free, up to 16,384 in
-- all; returns how many it created. Run by the retention pass, in a transaction of its own, so
-- that no request of the application's runs DDL; while the pool is short, new tokens share
-- counters (mailroom_take_code_counter). SHARE UPDATE EXCLUSIVE on code_counters (which only
-- mailroom's roles may take) makes two collectors' passes take turns and lets requests go on.
CREATE OR REPLACE FUNCTION mailroom.mailroom_grow_code_counters() RETURNS INT
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET jit = off
    AS $$
DECLARE
    v_total INT;
    v_free  INT;
    v_add   INT;
BEGIN
    LOCK TABLE code_counters IN SHARE UPDATE EXCLUSIVE MODE;
    SELECT count(*), count(*) FILTER (WHERE c.free_at <= extract(epoch FROM clock_timestamp()))
      INTO v_total, v_free
      FROM code_counters c;
    v_add := least(greatest(64, v_total / 4) - v_free, 16384 - v_total);
    IF v_add <= 0 THEN
        RETURN 0;
    END IF;
    FOR v_slot IN v_total + 1 .. v_total + v_add LOOP
        EXECUTE format('CREATE SEQUENCE mailroom.mailroom_code_attempts_%s'
                       ' AS BIGINT MINVALUE 0 START 0 CACHE 1', v_slot);
        INSERT INTO code_counters (slot, token, free_at) VALUES (v_slot, NULL, 0);
    END LOOP;
    RETURN v_add;
END;
$$;
