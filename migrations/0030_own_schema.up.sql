-- Everything mailroom creates lives in its own schema, `mailroom`, owned by the migrations' role
-- with CREATE for nobody else, and every function pins its search_path to it (the function
-- files, applied after this migration). Before, the objects lived in the schema the migrations'
-- role created them in (usually `public`, where the database's owner and, before PostgreSQL 15,
-- every role may create objects): a role that could create there could place look-alike
-- overloads of mailroom's functions in the search path of mailroom's own sessions.
--
-- `collector migrate` creates the schema and, on an install that predates it, moves mailroom's
-- tables (with their indexes, constraints, owned sequences, triggers and grants), sequences,
-- types, view and functions there before any pending migration runs (collector/migrate.cc:
-- kMoveIntoOwnSchema; the old schema is found in the catalogue, never through a search path, and
-- never put in one). The function files then replace each function in place.
--
-- Reverting (down) leaves the objects in `mailroom`: the previous releases' functions found
-- their tables through the session's search path, so after a revert add `mailroom` to the
-- search path of the roles that run them.

-- pgcrypto (gen_random_bytes, the tokens' secrets' default) moves into `mailroom` when the
-- migrations' role owns it; an extension another role installed stays where it is (the default
-- is bound to the function, not to its name, and mailroom's functions call none of pgcrypto's).
DO $$
BEGIN
    IF (SELECT e.extnamespace <> 'mailroom'::regnamespace
               AND pg_has_role(current_user, e.extowner, 'MEMBER')
          FROM pg_extension e WHERE e.extname = 'pgcrypto') THEN
        ALTER EXTENSION pgcrypto SET SCHEMA mailroom;
    END IF;
END;
$$;

-- The collectors' turns: a transaction holds its turn by locking the table in SHARE UPDATE
-- EXCLUSIVE mode, which conflicts with itself and takes UPDATE, DELETE or TRUNCATE on the table
-- (only mailroom's roles have them), and with no lock a statement takes while it is parsed,
-- before its rights are checked; never by an advisory lock, which any role that can connect may
-- take and hold.
CREATE TABLE mailroom_retention_turn ();
COMMENT ON TABLE mailroom_retention_turn IS
    'Locked by the collector running the retention pass; holds no rows.';
CREATE TABLE mailroom_mark_turn ();
COMMENT ON TABLE mailroom_mark_turn IS
    'Locked by the collector changing its busy mark, for that statement; holds no rows.';
