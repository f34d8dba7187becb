#!/usr/bin/env bash
# Builds the binaries once on the host (offline Bazel, optimised) and stages them, with the
# mail catcher's SMTP peer, into DEST/bin/ (default: deploy/containers/bin/, git-ignored): the
# build context of the Containerfiles here. The files are copied from Bazel's opt output
# directory (not through the bazel-bin symlink, which the next build can repoint).
#
#   bash deploy/containers/stage.sh [DEST]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=${1:-$HERE}
cd "$ROOT"
# A Bazel server already running for this workspace is reused as it is; one started here exits
# by itself shortly after (no `bazel shutdown`, which would also stop someone else's server).
STARTUP=()
pgrep -f -- "--workspace_directory=$ROOT( |\$)" >/dev/null || STARTUP=(--max_idle_secs=15)
log=$(mktemp)
if ! bazel "${STARTUP[@]}" build -c opt //collector:collector //collector:verify //sender:sender \
    >"$log" 2>&1; then
  tail -40 "$log" >&2
  rm -f "$log"
  echo "stage: bazel build failed" >&2
  exit 1
fi
rm -f "$log"
# The opt output directory itself, not the bazel-bin symlink (another build may repoint it).
BIN=$(bazel "${STARTUP[@]}" info -c opt bazel-bin 2>/dev/null)
mkdir -p "$DEST/bin"
install -m 0755 "$BIN/collector/collector" "$BIN/collector/verify" "$BIN/sender/sender" "$DEST/bin/"
install -m 0644 sender/transport/testing/smtp_peer.py "$DEST/bin/"
echo "stage: binaries in $DEST/bin"
