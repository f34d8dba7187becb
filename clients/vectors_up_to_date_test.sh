#!/usr/bin/env bash
# testdata/vectors.json is exactly what //clients:make_vectors prints: the shared cases cannot
# drift from the C++ signer.
set -u
if ! clients/make_vectors > "$TEST_TMPDIR/vectors.json"; then
  echo "FAIL: make_vectors did not run"; exit 1
fi
if ! diff -u clients/testdata/vectors.json "$TEST_TMPDIR/vectors.json"; then
  echo "FAIL: clients/testdata/vectors.json differs from the generator's output; regenerate it:"
  echo "  bazel run //clients:make_vectors > clients/testdata/vectors.json"
  exit 1
fi
echo "vectors.json matches make_vectors"
