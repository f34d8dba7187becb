-- The objects stay in `mailroom` (see the up migration); only the turns' tables go.
DROP TABLE mailroom_retention_turn;
DROP TABLE mailroom_mark_turn;
