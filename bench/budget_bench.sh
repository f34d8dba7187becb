#!/usr/bin/env bash
# One group budget shared by 3 senders, 60 s: integration_tests/budget_test with
# a longer run. Prints the test's figure lines (pace, worst window, grants, the spent-budget
# check). Usage: bash bench/budget_bench.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-60}
bazel test --test_env=MAILROOM_NODE_MODULES "--test_env=MAILROOM_BUDGET_RUN_SECONDS=$SECONDS_RUN" \
  --cache_test_results=no //integration_tests:budget_test >/dev/null 2>&1 || status=$?
grep '^budget_test:' bazel-testlogs/integration_tests/budget_test/test.log
exit "${status:-0}"
