#!/usr/bin/env bash
# The GPU check of optimizer.lazy_embedding (ops/cuda/adamw_rows.h; the key defaults to off until this passes),
# ~150 s. Run from the root of a checkout with its binaries at build/src/moetune/moetune and
# build/tests/moetune_tests (LD_LIBRARY_PATH set: scripts/gpu_env.sh); what comes back goes to $OUT. Correctness
# first, then the timing that decides:
#  1. the lazy embedding's GPU tests (bit-identity with the eager update through the engine on the tiny Qwen3-MoE
#     in three precisions, clipped and not, save and resume; the row kernels against the whole-table step), then
#     the AdamW / grad-norm tests its changes touch (the per-element code the eager, staged and lazy kernels share
#     in adamw_elements.cuh; the launch in parts with first_position; the norm's row-sparse read);
#  2. the embedding's optimizer share alone on Moonlight's shape (163840 x 2048, 8192 random tokens), eager vs lazy;
#  3. bench/run.sh --family moonlight --quick --no-hf --no-skew with optimizer.lazy_embedding=auto, then =off, the
#     same binary: the moetune rows of each.
set -u
: "${OUT:?OUT: where the logs go}"
T=build/tests/moetune_tests
start=$SECONDS
elapsed() { echo "$((SECONDS - start)) s"; }

echo "== 1. correctness"
timeout -k 5 45 $T --gtest_filter='LazyEmbeddingGpu.*' > $OUT/tests_lazy.log 2>&1
echo "LazyEmbeddingGpu rc=$? ($(elapsed))"
timeout -k 5 35 $T --gtest_filter='AdamWGpu.*:OptimizerAccessGpu.*:GradNormGpu.*' > $OUT/tests_adamw.log 2>&1
echo "AdamWGpu/OptimizerAccessGpu/GradNormGpu rc=$? ($(elapsed))"
cat $OUT/tests_lazy.log $OUT/tests_adamw.log |
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^\[       OK \]|Failure|differ|Expected|Which is|actual" |
  cut -c1-200 | head -50

echo "== 2. micro timing"
timeout -k 5 20 $T --gtest_also_run_disabled_tests --gtest_filter='LazyEmbeddingGpu.DISABLED_TimesMoonlightEmbedding' \
  > $OUT/timing.log 2>&1
echo "rc=$? ($(elapsed))"
grep -E "eager|lazy|OK \]|FAILED" $OUT/timing.log | cut -c1-200

echo "== 3. Moonlight bench (lazy, then eager)"
for mode in auto off; do
  left=$((145 - (SECONDS - start)))
  if [ $left -lt 15 ]; then echo "lazy_embedding=$mode: no time left"; continue; fi
  mkdir -p $OUT/bench_$mode
  OUT=$OUT/bench_$mode MOETUNE_SET="optimizer.lazy_embedding=$mode output.save_final=false" timeout -k 5 $left \
    bash bench/run.sh --family moonlight --quick --no-hf --no-skew > $OUT/bench_$mode.log 2>&1
  echo "lazy_embedding=$mode rc=$? ($(elapsed))"
  grep -h "optimizer.lazy_embedding" $OUT/bench_$mode/logs/*.log 2>/dev/null | head -1 | cut -c1-160
  tail -n 8 $OUT/bench_$mode.log | cut -c1-200  # report.py's table: the moetune row
done
echo "== done ($(elapsed))"
