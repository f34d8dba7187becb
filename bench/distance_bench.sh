#!/usr/bin/env bash
# The whole pipeline at a network distance from its provider: PostgreSQL -> collector -> sender
# -> bench/latency_proxy.py (half the round trip each way) -> postfix's smtp-sink, the SES
# emulator's front, or bench/http_sink.py answering as Postmark (the postmark transport); postfix's
# smtp-source with as many sessions through the same proxy, in the same run, for comparison.
# Every round trip with every connection count; prints each run, the proxy's count of round
# trips per SMTP message, and a table of emails/s.
# Installs postfix (unconfigured) if missing; SES needs the npm peers (bash .ci/setup).
#
# Usage: bash bench/distance_bench.sh [pipeline_bench flags, e.g. --rtt_ms=50 --connections=64
#                                      --messages=3000 --ses_messages=3000 --sender=PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v smtp-sink >/dev/null; then
  echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null
fi
export MAILROOM_NODE_MODULES=${MAILROOM_NODE_MODULES:-$PWD/.cache/node/node_modules}
bazel build -c opt //bench:pipeline_bench >/dev/null 2>&1
export RUNFILES_DIR=$PWD/bazel-bin/bench/pipeline_bench.runfiles
bazel-bin/bench/pipeline_bench --rtt_ms=20,50,100 --connections=16,64,128 --messages=3000 \
  --ses_messages=3000 --http_messages=3000 "$@"
