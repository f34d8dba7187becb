#!/bin/sh
# Test-stack PostgreSQL: initdb on first start (TRUST auth, see postgres.Containerfile), then
# run the server in the foreground listening on all interfaces. Extra arguments go to postgres.
set -eu
: "${PGDATA:=/var/lib/postgresql/data/pgdata}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chmod 0700 "$PGDATA"
  initdb -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-instructions >/dev/null
  # TEST ONLY: trust every client on the container network.
  printf '%s\n' 'host all all 0.0.0.0/0 trust' 'host all all ::/0 trust' >>"$PGDATA/pg_hba.conf"
  echo "postgres-entrypoint: initialised $PGDATA (trust authentication: test stack only)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' \
  -c unix_socket_directories=/var/run/postgresql "$@"
