-- A uniformly distributed 5-digit code from a cryptographic source. Rejection sampling over
-- 32 random bits: 4294900000 is the largest multiple of 100000 below 2^32. The bits are the
-- first 4 bytes of gen_random_uuid() (PostgreSQL's own, from pg_strong_random: a version 4 UUID
-- is random but for its version and variant bits, in bytes 7 and 9), so the function needs no
-- extension, wherever pgcrypto lives.

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
