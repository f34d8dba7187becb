#!/usr/bin/env bash
# Sender throughput to postfix's smtp-sink for 1, 4 and 8 connections, next to smtp-source's
# own figure on the same sink (the ceiling). Installs postfix (unconfigured) if missing.
# Usage: bash bench/smtp_throughput.sh [MESSAGES]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
if ! command -v smtp-sink >/dev/null; then
  echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# smtp-sink binds with SO_REUSEPORT: make sure no leftover shares the port.
pkill -f "smtp-sink .*127.0.0.1:$PORT" 2>/dev/null || true
smtp-sink -u nobody 127.0.0.1:$PORT 1000 >/dev/null 2>&1 &
SINK=$!
trap 'kill $SINK 2>/dev/null; wait $SINK 2>/dev/null || true' EXIT
sleep 0.5
bazel build -c opt //bench:smtp_bench >/dev/null 2>&1
BENCH=${SMTP_BENCH:-bazel-bin/bench/smtp_bench}
for c in 1 4 8; do
  t0=$(date +%s.%N)
  smtp-source -d -l 1500 -m $N -s $c -f no-reply@example.test -t bench@example.test 127.0.0.1:$PORT >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print('smtp-source (ceiling): $c sessions, $N messages: %.0f msg/s' % ($N/($t1-$t0)))"
  "$BENCH" --url=smtp://127.0.0.1:$PORT --connections=$c --messages=$N
done
