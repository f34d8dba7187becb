#!/usr/bin/env bash
# Runs one verifier's own test suite (node --test, python3 -m unittest or go test) on a copy of
# its folder, against the shared testdata/vectors.json.
#   client_test.sh js|python|go
set -euo pipefail
lang=$1
work="$TEST_TMPDIR/$lang"
rm -rf "$work"
cp -rL "clients/$lang" "$work"
export MAILROOM_VECTORS="$PWD/clients/testdata/vectors.json"
cd "$work"
case "$lang" in
  js) exec node --test ;;
  python) exec /usr/bin/python3 -m unittest -v ;;
  go)
    # Offline and self-contained: the standard library only, caches in the test's own folder.
    export GOCACHE="$TEST_TMPDIR/gocache" GOPATH="$TEST_TMPDIR/gopath" GOFLAGS=-mod=mod \
      GOTOOLCHAIN=local GOPROXY=off GO111MODULE=on HOME="$TEST_TMPDIR"
    go vet ./...
    exec go test -count=1 -v ./...
    ;;
  *) echo "client_test.sh: unknown verifier $lang" >&2; exit 2 ;;
esac
