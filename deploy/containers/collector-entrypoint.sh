#!/bin/sh
# Entrypoint of the collector image: `exec collector "$@"`, except that `migrate` / `migrate up`
# is retried while it fails (PostgreSQL still starting: `collector migrate` exits 1 when it
# cannot connect). MAILROOM_MIGRATE_ATTEMPTS (default 60) x MAILROOM_MIGRATE_DELAY seconds
# (default 2). Migrations are idempotent and take turns, so retrying is safe.
set -eu
BIN=/usr/local/bin/collector
if [ "${1:-}" = migrate ] && { [ $# -eq 1 ] || [ "${2:-}" = up ]; }; then
  attempts=${MAILROOM_MIGRATE_ATTEMPTS:-60}
  delay=${MAILROOM_MIGRATE_DELAY:-2}
  n=1
  until "$BIN" "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      echo "collector-entrypoint: migrate failed $n times, giving up" >&2
      exit 1
    fi
    echo "collector-entrypoint: migrate failed (attempt $n/$attempts), retrying in ${delay}s" >&2
    n=$((n + 1))
    sleep "$delay"
  done
  exit 0
fi
exec "$BIN" "$@"
