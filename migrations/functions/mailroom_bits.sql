-- p_n bits, those of p_slots (1-based, distinct) set: built once, in slot order, O(p_n). Called by
-- mailroom_batch_record and mailroom_batch_keep_sent.
-- A call per batch (its sub-select keeps PostgreSQL from inlining it), so its path is pinned
-- like any other function's.
CREATE OR REPLACE FUNCTION mailroom.mailroom_bits(p_n integer, p_slots integer[]) RETURNS bit varying
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT coalesce((SELECT (string_agg(repeat('0', x.s - x.prev - 1) || '1', '' ORDER BY x.s)
                             || repeat('0', p_n - max(x.s)))::VARBIT
                       FROM (SELECT s, coalesce(lag(s) OVER (ORDER BY s), 0) AS prev
                               FROM unnest(p_slots) AS s) x),
                    repeat('0', p_n)::VARBIT);
$$;
