-- Back before 0051: the abuse limits' counters are logged again (the table is rewritten with
-- its rows; what a crash had emptied stays empty).
ALTER TABLE mailroom.mailroom_address_requests SET LOGGED;
