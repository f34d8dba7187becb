-- The address as the abuse limits count it: the normalised address (lower(btrim(...)), as
-- uniqueness, suppressions and email_change compare addresses) with its sub-address folded
-- away, so that the sub-addresses of one mailbox share its limit: `+tag` removed from the
-- local part at every domain, and at gmail.com and googlemail.com (which ignore dots and are
-- one domain) the dots too. Every domain, not a list of the providers that offer
-- sub-addresses: at a domain without them the cost is that `a+x@` and `a+y@` share a limit,
-- while a list would let every unlisted provider's sub-addresses through
-- (docs/sql.md, "Abuse limits"). Used for the limits only: accounts, tokens and deliveries
-- keep the address as given.
--
-- Inlined into its callers (LANGUAGE sql, IMMUTABLE, one expression), so no SET search_path:
-- it names nothing but pg_catalog's functions.
CREATE OR REPLACE FUNCTION mailroom.mailroom_limit_address(p_address text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
               WHEN pg_catalog.split_part(pg_catalog.lower(pg_catalog.btrim(p_address)), '@', 2)
                    IN ('gmail.com', 'googlemail.com')
               THEN pg_catalog.replace(
                        pg_catalog.split_part(
                            pg_catalog.split_part(pg_catalog.lower(pg_catalog.btrim(p_address)),
                                                  '@', 1),
                            '+', 1),
                        '.', '') || '@gmail.com'
               ELSE pg_catalog.regexp_replace(pg_catalog.lower(pg_catalog.btrim(p_address)),
                                              '^([^@+]*)\+[^@]*@', '\1@')
           END
$$;
