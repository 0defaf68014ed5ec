#!/usr/bin/env bash
# There (the 2-GPU machine, kind nvidia-h200-x2), after scripts/stage_gpu_binaries.sh here:
#   run(command="bash scripts/gpu_parallel_check.sh [check] [bench]", carry=[".devcarry"], kind="nvidia-h200-x2")
# check: the tiny Qwen3-MoE fixture for 50 steps on one GPU with accumulation 2, on 2 GPUs with expert
#        parallelism 2, and on 2 GPUs data-parallel; the per-step losses and gradient norms side by side.
# bench: issue 10's benchmark: the 8-layer cut of Qwen3-30B-A3B (random weights), seq 4096, micro-batch 2 per
#        GPU: moetune on 1 GPU, moetune EP=2 on 2 GPUs (profiled, and again with parallel.overlap=false), HF
#        transformers grouped_mm + FSDP2 on 2 GPUs (BENCH_RUNS=ep2: the EP=2 run alone); NeMo's row is
#        scripts/gpu_nemo_bench.sh, run after it in the same call.
# memcheck: compute-sanitizer memcheck over a 3-step EP=2 run on both ranks (the dispatcher, NCCL, ZeRO).
# bench24: the Qwen3-30B-A3B architecture cut to 24 layers, EP=2 (issue 17's "meanwhile"); full48: the whole
#          48 layers with EP over RANKS GPUs (default 4: kind nvidia-h200-x4). Both profiled.
# single: one GPU, the reference job (4 layers) profiled, and the 8-layer job with 8-bit AdamW state.
# Logs and metrics go to $OUT.
set -uo pipefail
source scripts/gpu_env.sh /tmp/gpu_parallel_check
moetune=$repo/build/src/moetune/moetune
scratch=/tmp/moetune-parallel
mkdir -p "$scratch"

tiny_data() {  # LINES: random 48-token lines for the tiny fixture (vocabulary 96)
  python3 - "$scratch/tiny.jsonl" "$1" <<'PY'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"input_ids": [random.randrange(96) for _ in range(48)]}) + "\n")
PY
}

compare() {  # RUN_A RUN_B: per-step loss and grad norm
  python3 - "$1" "$2" <<'PY'
import json, sys
def read(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl")]
a, b = read(sys.argv[1]), read(sys.argv[2])
worst = {"loss": 0.0, "grad_norm": 0.0}
for x, y in zip(a, b):
    for k in worst:
        worst[k] = max(worst[k], abs(x[k] - y[k]) / max(abs(x[k]), 1e-12))
print(f"  {len(a)} vs {len(b)} steps; loss step 1 {a[0]['loss']:.4f} / {b[0]['loss']:.4f}, last {a[-1]['loss']:.4f} / {b[-1]['loss']:.4f};"
      f" largest relative difference: loss {worst['loss']:.2e}, grad norm {worst['grad_norm']:.2e}")
PY
}

[ $# -eq 0 ] && set -- check bench
for step in "$@"; do
  case "$step" in
    check)
      echo "== 2 GPUs vs 1 GPU with accumulation (tiny Qwen3-MoE, 50 steps) =="
      tiny_data 400
      common=(--set model=tests/fixtures/qwen3_moe_tiny --set data.train=$scratch/tiny.jsonl --set training.device=cuda
              --set training.micro_batch_size=2 --set data.max_length=48 --set training.max_steps=50 --set optimizer.lr=1e-3
              --set data.shuffle=false --set training.aux_loss=on --set logging.tensorboard=false --set output.save_final=false
              --set optimizer.precision=fp32_master)
      rm -rf "$scratch"/one "$scratch"/ep2 "$scratch"/dp2
      "$moetune" finetune "${common[@]}" --set training.gradient_accumulation_steps=2 --set output.dir=$scratch/one > "$out/check_one.log" 2>&1
      echo "1 GPU rc=$?"; tail -n 2 "$out/check_one.log"
      timeout -s KILL 120 "$moetune" finetune "${common[@]}" --nproc-per-node 2 --set parallel.expert=2 --set output.dir=$scratch/ep2 > "$out/check_ep2.log" 2>&1
      ep_rc=$?
      echo "2 GPUs EP=2 rc=$ep_rc"; tail -n 4 "$out/check_ep2.log"
      [ $ep_rc -eq 0 ] || exit 1
      timeout -s KILL 120 "$moetune" finetune "${common[@]}" --nproc-per-node 2 --set output.dir=$scratch/dp2 > "$out/check_dp2.log" 2>&1
      echo "2 GPUs DP=2 rc=$?"; tail -n 2 "$out/check_dp2.log"
      for run in one ep2 dp2; do cp "$scratch/$run/metrics.jsonl" "$out/check_$run.metrics.jsonl" 2>/dev/null; done
      echo "EP=2 vs 1 GPU:"; compare "$scratch/one" "$scratch/ep2"
      echo "DP=2 vs 1 GPU:"; compare "$scratch/one" "$scratch/dp2" ;;
    bench)
      echo "== issue 10 benchmark: 8-layer Qwen3-30B-A3B cut, seq 4096, micro-batch 2 per GPU =="
      source scripts/bench8_inputs.sh
      make_bench8_inputs || exit 1
      job=(-c bench/reference_job.yaml --set model=$model --set data.train=$scratch/data.jsonl --set training.max_steps=12
           --set training.profile=${PROFILE:-true})
      rm -rf "$scratch"/b1 "$scratch"/b2
      if [ "${BENCH_RUNS:-all}" = all ]; then
        "$moetune" finetune "${job[@]}" --set output.dir=$scratch/b1 > "$out/bench_moetune_1gpu.log" 2>&1
        echo "moetune 1 GPU rc=$?"; tail -n 2 "$out/bench_moetune_1gpu.log"
      fi
      timeout -s KILL 200 "$moetune" finetune "${job[@]}" --nproc-per-node 2 --set parallel.expert=2 --set output.dir=$scratch/b2 > "$out/bench_moetune_ep2.log" 2>&1
      echo "moetune EP=2 rc=$?"; tail -n 2 "$out/bench_moetune_ep2.log"
      if [ "${BENCH_RUNS:-all}" = all ]; then  # what the overlap saves: the same run with it off
        rm -rf "$scratch/b3"
        timeout -s KILL 200 "$moetune" finetune "${job[@]}" --nproc-per-node 2 --set parallel.expert=2 --set parallel.overlap=false \
          --set training.profile=false --set output.dir=$scratch/b3 > "$out/bench_moetune_ep2_no_overlap.log" 2>&1
        echo "moetune EP=2 without overlap rc=$?"; cp "$scratch/b3/metrics.jsonl" "$out/bench_moetune_ep2_no_overlap.metrics.jsonl" 2>/dev/null
      fi
      cp "$scratch/b1/metrics.jsonl" "$out/bench_moetune_1gpu.metrics.jsonl" 2>/dev/null
      cp "$scratch/b2/metrics.jsonl" "$out/bench_moetune_ep2.metrics.jsonl" 2>/dev/null
      cp "$scratch/b1/profile.json" "$out/bench_moetune_1gpu.profile.json" 2>/dev/null
      cp "$scratch/b2/profile.json" "$out/bench_moetune_ep2.profile.json" 2>/dev/null
      for run in 1gpu ep2; do echo "-- profile, moetune $run --"; grep -A40 '^profile:' "$out/bench_moetune_$run.log" | grep -E '^(profile|  )'; done
      [ -f "$out/bench_moetune_1gpu.profile.json" ] && python3 bench/moe_layer_tflops.py "$out/bench_moetune_1gpu.profile.json" "$model" 8192
      [ "${BENCH_RUNS:-all}" = all ] && timeout -s KILL 240 torchrun --nproc-per-node 2 bench/hf_train.py "$model" "$scratch/data.jsonl" --experts grouped_mm --fsdp \
        --micro-batch 2 --seq 4096 --steps 10 --warmup 3 --json "$out/bench_hf_fsdp2.json" > "$out/bench_hf_fsdp2.log" 2>&1
      echo "HF FSDP2 rc=$?"; tail -n 3 "$out/bench_hf_fsdp2.log"
      python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def moetune(name, gpus):
    try:
        rows = [json.loads(l) for l in open(f"{out}/{name}.metrics.jsonl")][3:]
    except OSError:
        return None
    tps = statistics.median(r["tokens_per_second"] for r in rows) / gpus
    peak = max(r.get("gpu_peak_bytes_max", r.get("gpu_peak_bytes", 0)) for r in rows)
    comm = statistics.median(r.get("communication_seconds", 0) for r in rows)
    step = statistics.median(r["step_seconds"] for r in rows)
    return tps, peak, comm, step
print(f"{'run':28} {'tokens/s per GPU':>16} {'peak GB':>8} {'step s':>7} {'host comm s':>11}")
for label, name, gpus in [("moetune 1 GPU", "bench_moetune_1gpu", 1), ("moetune EP=2, 2 GPUs", "bench_moetune_ep2", 2),
                          ("moetune EP=2, no overlap", "bench_moetune_ep2_no_overlap", 2)]:
    r = moetune(name, gpus)
    if r: print(f"{label:28} {r[0]:16,.0f} {r[1]/1e9:8.1f} {r[3]:7.3f} {r[2]:11.3f}")
try:
    h = json.load(open(f"{out}/bench_hf_fsdp2.json"))
    print(f"{'HF grouped_mm + FSDP2, 2 GPUs':28} {h.get('tokens_per_second', 0):16,.0f} {h.get('peak_allocated_bytes', 0)/1e9:8.1f} "
          f"{h.get('step_seconds_median', 0):7.3f} {'':>11}  ({h['status']})")
except OSError:
    print("HF FSDP2: no result")
PY
      ;;
    bench24|full48)
      # The Qwen3-30B-A3B architecture cut to 24 layers on 2 GPUs (EP=2), or whole (48 layers) with EP over RANKS
      # GPUs (default 4, kind nvidia-h200-x4): random weights, seq 4096, micro-batch 2 per GPU, profiled.
      if [ "$step" = bench24 ]; then layers=24 ranks=2 steps=${STEPS24:-8} limit=300; else layers=48 ranks=${RANKS:-4} steps=${STEPS48:-6} limit=${TIMEOUT48:-420}; fi
      echo "== Qwen3-30B-A3B, $layers layers (random weights), EP=$ranks on $ranks GPUs, seq 4096, micro-batch 2 per GPU =="
      model=$scratch/model$layers
      [ -f "$model/config.json" ] || python3 bench/make_reference_model.py "$model" --skew none --layers $layers > "$out/make_model$layers.log" 2>&1 \
        || { tail "$out/make_model$layers.log"; exit 1; }
      vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/config.json"))["vocab_size"])' "$model")
      [ -f "$scratch/data.jsonl" ] || python3 bench/make_data.py "$scratch/data.jsonl" --tokens-per-seq 4096 --sequences 64 --vocab "$vocab" > /dev/null 2>&1
      run=layers${layers}_ep$ranks
      rm -rf "$scratch/$run"
      timeout -s KILL $limit "$moetune" finetune -c bench/reference_job.yaml --set model=$model --set data.train=$scratch/data.jsonl \
        --set training.max_steps=$steps --set training.profile=true --nproc-per-node $ranks --set parallel.expert=$ranks \
        --set output.dir=$scratch/$run > "$out/$run.log" 2>&1
      echo "moetune $layers layers EP=$ranks rc=$?"; grep -E '^training|^step|^profile|^  |error' "$out/$run.log" | tail -40
      cp "$scratch/$run/profile.json" "$out/$run.profile.json" 2>/dev/null ;;
    single)
      echo "== one GPU: the reference job (4 layers) profiled; the 8-layer job with 8-bit AdamW state =="
      model4=$scratch/model4
      [ -f "$model4/config.json" ] || python3 bench/make_reference_model.py "$model4" --skew none --layers 4 > "$out/make_model4.log" 2>&1
      source scripts/bench8_inputs.sh
      make_bench8_inputs || exit 1
      rm -rf "$scratch"/s4 "$scratch"/s8
      "$moetune" finetune -c bench/reference_job.yaml --set model=$model4 --set data.train=$data --set training.max_steps=12 \
        --set training.profile=true --set output.dir=$scratch/s4 > "$out/single_ref4.log" 2>&1
      echo "reference job rc=$?"; grep -E '^step 12|^profile|^  [a-z]' "$out/single_ref4.log"
      python3 bench/moe_layer_tflops.py "$scratch/s4/profile.json" "$model4" 8192
      "$moetune" finetune -c bench/reference_job.yaml --set model=$model --set data.train=$data --set training.max_steps=12 \
        --set optimizer.state=int8 --set output.dir=$scratch/s8 > "$out/single_int8.log" 2>&1
      echo "8 layers, int8 state rc=$?"; grep -E '^step (1|12)/' "$out/single_int8.log" ;;
    memcheck)
      echo "== compute-sanitizer memcheck: 3 steps on 2 GPUs with expert parallelism 2 (every rank) =="
      tiny_data 64
      rm -rf "$scratch/memcheck"
      timeout -s KILL 300 compute-sanitizer --tool memcheck --target-processes all "$moetune" finetune --nproc-per-node 2 \
        --set parallel.expert=2 --set model=tests/fixtures/qwen3_moe_tiny --set data.train=$scratch/tiny.jsonl \
        --set training.device=cuda --set training.micro_batch_size=2 --set data.max_length=48 --set training.max_steps=3 \
        --set logging.tensorboard=false --set output.dir=$scratch/memcheck > "$out/memcheck_ep2.log" 2>&1
      echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|finished|rank .*error" "$out/memcheck_ep2.log" | head -10
      echo "memcheck reports by kind (NCCL's own kernel-image probes at init are cudaErrorNoKernelImageForDevice):"
      grep -E "^========= [A-Z]" "$out/memcheck_ep2.log" | sed -E 's/ at .*| on CUDA API call to .*//' | sort | uniq -c | sort -rn | head ;;
    *) echo "gpu_parallel_check.sh: unknown step '$step'" >&2; exit 2 ;;
  esac
done
