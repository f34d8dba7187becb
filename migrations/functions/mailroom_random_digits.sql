-- A uniformly distributed code of p_length digits (1 to 12) from a cryptographic source, as
-- mailroom_random_code (5 digits, the tokens' default) draws it: rejection sampling over 48
-- random bits of gen_random_uuid() (bytes 1-6, before its version and variant bits), the
-- largest multiple of 10^p_length below 2^48 as the bound.
CREATE OR REPLACE FUNCTION mailroom.mailroom_random_digits(p_length INT) RETURNS TEXT
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_mod   BIGINT := (10::NUMERIC ^ p_length)::BIGINT;
    v_bound BIGINT;
    n       BIGINT;
BEGIN
    IF p_length IS NULL OR p_length < 1 OR p_length > 12 THEN
        RAISE EXCEPTION 'a code has 1 to 12 digits, not %', p_length
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_bound := (281474976710656 / v_mod) * v_mod;
    LOOP
        n := ('x' || encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6), 'hex'))::BIT(48)::BIGINT;
        IF n < v_bound THEN
            RETURN lpad((n % v_mod)::TEXT, p_length, '0');
        END IF;
    END LOOP;
END;
$$;
