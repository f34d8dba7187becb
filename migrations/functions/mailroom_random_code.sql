-- A uniformly distributed 5-digit code from a cryptographic source. Rejection sampling over
-- 32 random bits: 4294900000 is the largest multiple of 100000 below 2^32.

CREATE OR REPLACE FUNCTION mailroom.mailroom_random_code() RETURNS character varying
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    n BIGINT;
BEGIN
    LOOP
        n := ('x' || encode(gen_random_bytes(4), 'hex'))::BIT(32)::BIGINT;
        IF n < 4294900000 THEN
            RETURN lpad((n % 100000)::TEXT, 5, '0');
        END IF;
    END LOOP;
END;
$$;

-- Every token's code comes from it.
ALTER TABLE tokens ALTER COLUMN code SET DEFAULT mailroom_random_code();
