#!/usr/bin/env bash
# There (one H200), after scripts/stage_gpu_binaries.sh here:
#   run(command="bash scripts/gpu_memory_check.sh [tests] [ref4] [layers12] [layers12x] [long] [long_hf]", carry=[".devcarry"])
# Issue 11's memory work, measured against the plan:
# tests:    the GPU tests of recomputation, the update during the backward pass and the memory plan.
# ref4:     the reference job (Qwen3-30B-A3B cut to 4 layers, 2 x 4096 tokens, pure bf16) as it is, with each
#           training.recompute mode, and with clipping off (which turns optimizer.update_in_backward on).
# layers12: the 12-layer cut at micro-batch 2: as it is, then with 8-bit state + the update in the backward pass
#           + recompute experts, then training.micro_batch_size: auto.
# layers12x: the 12-layer cut without clipping (so the update runs in the backward pass): micro-batch 2 as it is,
#           4 with recompute experts, 8 with recompute full (pure bf16), and 4 with 8-bit state.
# long:     the 4-layer cut at sequence 32768, micro-batch 1, with recomputation.
# long_hf:  HF transformers (grouped_mm) on the same job, as it is and with gradient checkpointing (or its OOM).
# Each run prints its step line (tokens/s, peak) and the plan's prediction; logs go to $OUT.
set -uo pipefail
source scripts/gpu_env.sh /tmp/gpu_memory_check
moetune=$repo/build/src/moetune/moetune
tests=$repo/build/tests/moetune_tests
scratch=/tmp/moetune-memory
mkdir -p "$scratch"

model_and_data() {  # LAYERS SEQ: $model and $data for that cut and sequence length
  model=$scratch/model$1
  [ -f "$model/config.json" ] || python3 bench/make_reference_model.py "$model" --skew none --layers "$1" > "$out/make_model$1.log" 2>&1 \
    || { tail -3 "$out/make_model$1.log"; return 1; }
  data=$scratch/data$2.jsonl
  [ -f "$data" ] || python3 bench/make_data.py "$data" --tokens-per-seq "$2" --sequences 32 --vocab 151936 > /dev/null 2>&1
}

# NAME TOKENS INSPECT_FLAGS -- finetune --set overrides: runs 10 steps, prints the last step line and the plan.
measure() {
  local name=$1 tokens=$2 flags=$3; shift 4
  rm -rf "$scratch/run"
  timeout 240 "$moetune" finetune -c bench/reference_job.yaml --set model=$model --set data.train=$data \
    --set training.max_steps=10 --set output.dir=$scratch/run "$@" > "$out/$name.log" 2>&1
  local rc=$? planned
  planned=$("$moetune" inspect "$model" --tokens "$tokens" $flags --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin); print(r["gpu_step"]["predicted_peak_bytes"].get(sys.argv[1], 0) / 1e9)' "$PRECISION")
  printf '%-34s rc=%s plan %5.1f GB | %s\n' "$name" "$rc" "$planned" \
    "$(grep -E '^step 10/' "$out/$name.log" | sed -E 's/.*\| ([0-9]+ tok\/s).*GPU peak ([0-9.]+ GB).*/\1, peak \2/')"
  [ $rc -eq 0 ] || tail -3 "$out/$name.log"
}

[ $# -eq 0 ] && set -- tests ref4 layers12 long
for step in "$@"; do
  case "$step" in
    tests)
      echo "== GPU tests: recomputation, update in backward, memory plan =="
      timeout 200 "$tests" --gtest_filter='RecomputeGpu.*:UpdateInBackwardGpu.*:MemoryPlanGpu.*:TrainingGpu.*' > "$out/tests.log" 2>&1
      echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is|actual|step (1|50):" "$out/tests.log" | head -40 ;;
    ref4)
      echo "== reference job (4 layers, 2 x 4096 tokens, pure bf16) =="
      model_and_data 4 4096 || continue
      PRECISION=pure_bf16
      measure ref4 8192 "" --
      for mode in experts attention full; do
        measure "ref4 recompute $mode" 8192 "--recompute $mode" -- --set training.recompute=$mode
      done
      measure "ref4 no clip (update in bwd)" 8192 "--update-in-backward" -- --set optimizer.max_grad_norm=0
      measure "ref4 no clip, update off" 8192 "" -- --set optimizer.max_grad_norm=0 --set optimizer.update_in_backward=off
      measure "ref4 no clip + recompute full" 8192 "--update-in-backward --recompute full" -- \
        --set optimizer.max_grad_norm=0 --set training.recompute=full ;;
    layers12)
      echo "== 12-layer cut (micro-batch 2 x 4096) =="
      model_and_data 12 4096 || continue
      PRECISION=pure_bf16
      measure l12 8192 "" --
      PRECISION=pure_bf16+int8
      measure "l12 int8+upd-bwd+recompute experts" 8192 "--update-in-backward --recompute experts" -- --set optimizer.state=int8 \
        --set optimizer.max_grad_norm=0 --set training.recompute=experts
      PRECISION=pure_bf16
      rm -rf "$scratch/run"
      timeout 240 "$moetune" finetune -c bench/reference_job.yaml --set model=$model --set data.train=$data --set training.max_steps=6 \
        --set training.micro_batch_size=auto --set output.dir=$scratch/run > "$out/l12_auto.log" 2>&1
      echo "l12 micro_batch_size auto rc=$?"; grep -E "micro_batch_size auto|^step 6/" "$out/l12_auto.log" ;;
    layers12x)
      echo "== 12-layer cut without clipping (the update runs in the backward pass): the issue's 12-layer targets (>= 54 k tokens/s, <= 65 GB) =="
      model_and_data 12 4096 || continue
      PRECISION=pure_bf16
      measure "l12 mb2 no clip (upd-bwd)" 8192 "--update-in-backward" -- --set optimizer.max_grad_norm=0
      measure "l12 mb4 no clip (upd-bwd) + recompute experts" 16384 "--update-in-backward --recompute experts" -- \
        --set training.micro_batch_size=4 --set optimizer.max_grad_norm=0 --set training.recompute=experts
      measure "l12 mb8 no clip (upd-bwd) + recompute full" 32768 "--update-in-backward --recompute full" -- \
        --set training.micro_batch_size=8 --set optimizer.max_grad_norm=0 --set training.recompute=full
      PRECISION=pure_bf16+int8
      measure "l12 mb4 int8 + no clip (upd-bwd)" 16384 "--update-in-backward" -- --set training.micro_batch_size=4 \
        --set optimizer.state=int8 --set optimizer.max_grad_norm=0 ;;
    long)
      echo "== 4 layers at sequence 32768, micro-batch 1 =="
      model_and_data 4 32768 || continue
      PRECISION=pure_bf16
      for mode in none experts full; do
        measure "seq32k recompute $mode" 32768 "--recompute $mode" -- --set data.max_length=32768 \
          --set training.micro_batch_size=1 --set training.recompute=$mode
      done ;;
    long_hf)
      echo "== HF transformers (grouped_mm) on the 4-layer cut at sequence 32768, micro-batch 1 =="
      model_and_data 4 32768 || continue
      for checkpointing in "" --gradient-checkpointing; do
        name="hf_seq32k${checkpointing:+_checkpointing}"
        timeout 300 python3 bench/hf_train.py "$model" "$data" --experts grouped_mm --micro-batch 1 --seq 32768 --steps 6 \
          --warmup 2 $checkpointing --json "$out/$name.json" > "$out/$name.log" 2>&1
        echo "$name rc=$?"; python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r.get(k) for k in ("label", "status", "tokens_per_second", "peak_allocated_bytes", "peak_reserved_bytes", "error")})' "$out/$name.json" 2>/dev/null || tail -3 "$out/$name.log"
      done ;;
    *) echo "gpu_memory_check.sh: unknown step '$step'" >&2; exit 2 ;;
  esac
done
