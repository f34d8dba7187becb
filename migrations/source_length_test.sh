#!/bin/sh
# Every function and view file (migrations/functions/, migrations/views/) is at most 100 lines,
# its contract included: a longer function is an orchestrator of parts, each in a file of its
# own (docs/sql.md, "Where the SQL lives"). Lists every file over the limit and fails.
set -eu
limit=100
bad=0
for f in "$@"; do
  n=$(wc -l < "$f")
  if [ "$n" -gt "$limit" ]; then
    echo "$f: $n lines (at most $limit)"
    bad=1
  fi
done
[ "$#" -gt 0 ] || { echo "no files given" >&2; exit 1; }
[ "$bad" -eq 0 ] && echo "$# files, each at most $limit lines"
exit "$bad"
