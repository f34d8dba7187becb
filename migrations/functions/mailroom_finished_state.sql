-- Outcome states counted: everything but 'leased' and 'retry'. Called by the delivery_counts
-- triggers and mailroom_prune_deliveries.
-- Inlined into its callers (enum comparisons only: a cast of the enum to text is not immutable,
-- and an IMMUTABLE function whose body is not is never inlined), so no SET search_path (a
-- function with settings is never inlined either):
-- it runs only under its pinned callers' search path and names mailroom's tables
-- schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_finished_state(s delivery_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT s <> 'leased' AND s <> 'retry';
$$;
