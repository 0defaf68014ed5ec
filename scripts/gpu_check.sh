#!/usr/bin/env bash
# There (the GPU machine), from the repository root, after scripts/stage_gpu_binaries.sh here:
#   run(command="bash scripts/gpu_check.sh", carry=[".devcarry"])
# Runs the whole test suite on the GPU, compute-sanitizer memcheck over the GPU tests, and the transformers
# check of folders moetune saved. Logs go to $OUT. The tests were built with absolute fixture paths of the
# dev checkout (/work/main), so that path is linked to this checkout when it is free.
set -uo pipefail
repo=$PWD
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
[ -e /work/main ] || { mkdir -p /work && ln -s "$repo" /work/main; }
mkdir -p build/src/moetune build/tests
cp .devcarry/moetune build/src/moetune/moetune
cp .devcarry/moetune_tests build/tests/moetune_tests
nvidia_libs=$(python3 -c "import glob,os,nvidia;print(':'.join(glob.glob(os.path.dirname(nvidia.__path__[0])+'/nvidia/*/lib')))")
export LD_LIBRARY_PATH=$repo/.devcarry:$nvidia_libs:/usr/local/cuda/lib64
gpu_tests='CastCuda.*:*Gpu*'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
echo "== all tests, on the GPU machine =="
/work/main/build/tests/moetune_tests > "$out/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED" "$out/tests.log"
echo "== GPU tests =="
/work/main/build/tests/moetune_tests --gtest_filter="$gpu_tests" 2>&1 | tee "$out/gpu_tests.log" | grep -E "OK|FAILED|Skipped|PASSED"
echo "== compute-sanitizer memcheck on the GPU tests =="
compute-sanitizer --tool memcheck --leak-check full /work/main/build/tests/moetune_tests --gtest_filter="$gpu_tests" \
  > "$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log"
echo "== transformers loads what moetune saved =="
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 tests/reference/check_saved_loads.py /work/main/build/src/moetune/moetune tests/fixtures 2>&1 \
  | grep -E "OK|FAIL|Error" | tee "$out/transformers_check.log"
