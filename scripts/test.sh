#!/usr/bin/env bash
# Builds and runs every test twice: the release build (with the CUDA code when nvcc is found; GPU tests
# skip with the reason when no GPU is present) and the ASan+UBSan build, which also runs the fuzz tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
scripts/build.sh asan
jobs=$(nproc)
echo "== release build =="
ctest --test-dir build --output-on-failure -j "$jobs"
echo "== ASan + UBSan build =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
