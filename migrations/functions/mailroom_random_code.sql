-- A uniformly distributed 5-digit code from a cryptographic source: rejection sampling over the
-- first 32 bits of gen_random_uuid() (PostgreSQL's own pg_strong_random; 4294900000 is the
-- largest multiple of 100000 below 2^32), so it needs no extension, wherever pgcrypto lives.
-- Called by the tokens' column defaults, as the role that inserts: the one function of the
-- schema PUBLIC may still execute (collector migrate revokes the others).

CREATE OR REPLACE FUNCTION mailroom.mailroom_random_code() RETURNS character varying
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    n BIGINT;
BEGIN
    LOOP
        n := ('x' || encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 4), 'hex'))::BIT(32)::BIGINT;
        IF n < 4294900000 THEN
            RETURN lpad((n % 100000)::TEXT, 5, '0');
        END IF;
    END LOOP;
END;
$$;

-- Every token's code comes from it.
ALTER TABLE mailroom.tokens ALTER COLUMN code SET DEFAULT mailroom.mailroom_random_code();
