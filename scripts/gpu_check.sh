#!/usr/bin/env bash
# There (the GPU machine), from the repository root, after scripts/stage_gpu_binaries.sh here:
#   run(command="bash scripts/gpu_check.sh [tests] [memcheck] [full] [bench [bench/run.sh flags]]", carry=[".devcarry"])
# tests: the GPU tests (op tests against the CPU reference, model parity, the 50-step CPU/GPU run);
# memcheck: compute-sanitizer memcheck over the op tests; full: the whole suite plus the transformers check of
# folders moetune saved; bench: the side-by-side benchmark (bench/run.sh) with the rest of the arguments.
# Logs go to $OUT. The tests were built with absolute fixture paths of the dev checkout (/work/main), so that
# path is linked to this checkout when it is free.
set -uo pipefail
source scripts/gpu_env.sh /tmp/gpu_check
tests=/work/main/build/tests/moetune_tests
op_tests='CastCuda.*:*Gpu*:-*ModelParityGpu*:*TrainingGpu*:*EvalGpu*'
[ $# -eq 0 ] && set -- tests memcheck
while [ $# -gt 0 ]; do
  case "$1" in
    tests)
      echo "== GPU tests =="
      timeout ${TEST_TIMEOUT:-300} "$tests" --gtest_filter='CastCuda.*:*Gpu*' > "$out/gpu_tests.log" 2>&1
      echo "gpu tests rc=$?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|tests ran|logits|largest|step " "$out/gpu_tests.log" | head -80 ;;
    memcheck)
      echo "== compute-sanitizer memcheck on the op tests =="
      timeout ${MEMCHECK_TIMEOUT:-300} compute-sanitizer --tool memcheck --leak-check full "$tests" --gtest_filter="$op_tests" > "$out/memcheck.log" 2>&1
      echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | head -20 ;;
    full)
      echo "== all tests =="
      timeout 900 "$tests" > "$out/tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" "$out/tests.log" | head -40
      echo "== transformers loads what moetune saved =="
      python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
      python3 tests/reference/check_saved_loads.py /work/main/build/src/moetune/moetune tests/fixtures 2>&1 \
        | grep -E "OK|FAIL|Error" | tee "$out/transformers_check.log" ;;
    bench)
      shift
      echo "== side-by-side benchmark =="
      MOETUNE=/work/main/build/src/moetune/moetune OUT="$out/bench" bash bench/run.sh "$@"
      break ;;
    *) echo "gpu_check.sh: unknown step '$1'" >&2; exit 2 ;;
  esac
  shift
done
