-- The objects stay in `mailroom` (see the up migration); only the retention pass's turn goes.
DROP TABLE mailroom_retention_turn;
