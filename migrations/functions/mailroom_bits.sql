-- p_n bits, those of p_slots (1-based, distinct) set: built once, in slot order, O(p_n). Called by
-- mailroom_batch_record and mailroom_batch_keep_sent.
-- Inlined into its callers, so no SET search_path (a function with settings is never inlined):
-- it runs only under its pinned callers' search path and names mailroom's tables
-- schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_bits(p_n integer, p_slots integer[]) RETURNS bit varying
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce((SELECT (string_agg(repeat('0', x.s - x.prev - 1) || '1', '' ORDER BY x.s)
                             || repeat('0', p_n - max(x.s)))::VARBIT
                       FROM (SELECT s, coalesce(lag(s) OVER (ORDER BY s), 0) AS prev
                               FROM unnest(p_slots) AS s) x),
                    repeat('0', p_n)::VARBIT);
$$;
