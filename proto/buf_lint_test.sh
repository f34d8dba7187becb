#!/usr/bin/env bash
# `buf lint` with the STANDARD rules (exceptions, each with its reason, in proto/buf.yaml) over
# the protos as they are in the source tree.
set -euo pipefail
BUF=${MAILROOM_NODE_MODULES:-}/.bin/buf
[ -x "$BUF" ] || { echo "FAIL: MAILROOM_NODE_MODULES must point at the npm peers (run .ci/test)"; exit 1; }
ROOT=${TEST_SRCDIR:-$(pwd)}/mailroom/proto
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Runfiles are symlinks; buf wants a plain module directory.
cp -rL "$ROOT/." "$work/"
cd "$work"
if out=$("$BUF" lint 2>&1); then
  echo "PASS: buf lint"
else
  echo "FAIL: buf lint"; echo "$out"; exit 1
fi
