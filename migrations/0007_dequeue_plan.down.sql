DO $$
DECLARE
    f REGPROCEDURE;
BEGIN
    FOR f IN SELECT p.oid::REGPROCEDURE FROM pg_proc p
              WHERE p.proname = 'mailroom_dequeue' AND p.pronamespace = current_schema()::REGNAMESPACE
    LOOP
        EXECUTE format('ALTER FUNCTION %s RESET enable_seqscan RESET enable_bitmapscan'
                       ' RESET enable_sort', f);
    END LOOP;
END;
$$;
