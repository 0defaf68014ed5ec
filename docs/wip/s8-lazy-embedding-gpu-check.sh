#!/usr/bin/env bash
# s8-lazy-embedding: the first GPU call for optimizer.lazy_embedding (written in session 8 without a GPU; the key
# defaults to off until this passes). Binaries of branch s8-lazy-embedding (or of main once it is merged; this
# script sets the key itself). Correctness first, then the timing. ~150 s.
#  1. the lazy embedding's GPU tests (bit-identity with the eager update: engine on the tiny Qwen3-MoE in three
#     precisions, clipped and not, save/resume; the row kernels on a 300 x 2048 table) and the existing
#     optimizer / grad-norm tests its changes touch (adamw.cu's per-element code moved into adamw_elements.cuh,
#     the norm's row-sparse read);
#  2. the embedding's optimizer share alone on Moonlight's shape (163840 x 2048, 8192 random tokens), eager vs lazy;
#  3. bench/run.sh --family moonlight --quick --no-hf with the phase profile and optimizer.lazy_embedding=auto,
#     then the same job with optimizer.lazy_embedding=off, same binary. Compare the phases optimizer.adamw,
#     optimizer.norm, optimizer.zero_grad (smaller when lazy) and layers (holds the catch-up, larger when lazy).
set -u
T=build/tests/moetune_tests
start=$SECONDS
echo "== 1. correctness"
timeout -k 5 50 $T --gtest_filter='LazyEmbeddingGpu.*' > $OUT/tests.log 2>&1
echo "rc=$? ($((SECONDS - start)) s)"
timeout -k 5 40 $T --gtest_filter='AdamWGpu.*:GradNormGpu.*:OptimizerAccessGpu.EveryAccessVariantGivesTheSameBits:OptimizerAccessGpu.NormFoldedIntoTheStepMatchesTheNormPass:UpdateInBackwardGpu.*' \
  >> $OUT/tests.log 2>&1
echo "rc=$? ($((SECONDS - start)) s)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|^\[       OK \]|Failure|differ|Expected|Which is|actual" $OUT/tests.log | cut -c1-200 | head -45
echo "== 2. micro timing"
timeout -k 5 25 $T --gtest_also_run_disabled_tests --gtest_filter='LazyEmbeddingGpu.DISABLED_TimesMoonlightEmbedding' \
  > $OUT/timing.log 2>&1
echo "rc=$? ($((SECONDS - start)) s)"; grep -E "eager|OK \]|FAILED" $OUT/timing.log
echo "== 3. bench (lazy, then eager)"
left=$((140 - (SECONDS - start)))
MOETUNE_SET="training.profile=true optimizer.lazy_embedding=auto" timeout -k 5 $((left > 20 ? left : 20)) \
  bash bench/run.sh --family moonlight --quick --no-hf > $OUT/bench_lazy.log 2>&1
echo "lazy rc=$? ($((SECONDS - start)) s)"
S=${BENCH_SCRATCH:-/tmp/moetune-bench}
left=$((145 - (SECONDS - start)))
if [ $left -gt 15 ]; then
  timeout -k 5 $left build/src/moetune/moetune finetune -c bench/reference_job.yaml --set model=$S/model_moonlight \
    --set data.train=$S/data_4096.jsonl --set output.dir=$S/output_eager --set training.max_steps=6 \
    --set data.max_length=4096 --set training.micro_batch_size=2 --set training.profile=true \
    --set optimizer.lazy_embedding=off > $OUT/bench_eager.log 2>&1
  echo "eager rc=$? ($((SECONDS - start)) s)"
  rm -rf $S/output_eager
fi
for f in $(ls -d $OUT/bench_lazy.log $(ls -t $OUT/*/logs/moetune.log $OUT/logs/moetune.log 2>/dev/null) $OUT/bench_eager.log 2>/dev/null); do
  echo "-- $f"; grep -E "lazy_embedding|step [0-9]+/[0-9]+ \||profile:|  (phase|optimizer|layers|embedding|lm_head)" $f | cut -c1-150 | tail -22
done
