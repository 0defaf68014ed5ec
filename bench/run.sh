#!/usr/bin/env bash
# The side-by-side benchmark (shared DESIGN.md §5), one command on the GPU machine:
#
#   bench/run.sh [--quick] [--no-grouped] [--no-compile] [--no-eager] [--no-skew] [--no-hf] [--no-moetune]
#                [--layers N] [--micro-batch N] [--tiny] [--device cuda|cpu]
#                [--family qwen3_moe|gpt_oss|moonlight|deepseek_v3|glm4_5_air|glm4_7_flash|nemotron_h|qwen3_next]
#                [--peers] [--pairs N]
#
# --pairs N: N - 1 more (HF grouped_mm, moetune) pairs on the balanced model after the other runs, each HF run
# followed by moetune's; report.py sets each moetune run against its own pair's HF run and prints the ratios and
# their median. One H200 runs the same binary a few percent apart from one call to the next (its 700 W power
# cap takes more from the faster run's clock: docs/benchmarks.md, session 11), so a ratio is best read as the
# median of pairs run in turn.
#
# --peers: the peers on the balanced model too, each in its fastest configuration that computes HF's loss:
# HF grouped_mm + Liger kernels (RoPE, RMSNorm, fused linear cross-entropy; bench/hf_train.py --liger), and NVIDIA
# NeMo AutoModel 0.7.0 on one GPU (bench/nemo_train.py under torchrun, EP 1, its GroupedExperts and compiled
# attention). Their wheels travel in .whl/ (bench/README.md lists them): liger_kernel 0.8.5 beside the machine's
# transformers 5.17, NeMo with transformers 5.18.0 and torchao 0.18.0 in a folder of their own.
#
# --family gpt_oss: gpt-oss-20b's architecture instead of Qwen3-30B-A3B's (models named model_gpt_oss*), HF with
# its default eager attention (GPT-OSS has no SDPA path in transformers, for its sinks); no skewed runs.
# --family moonlight / deepseek_v3 / glm4_5_air / glm4_7_flash: Moonlight-16B-A3B's, DeepSeek-V3's, GLM-4.5-Air's or
# GLM-4.7-Flash's widths (bench/make_reference_model.py), models named model_<family>; no skewed runs.
# --family nemotron_h: Nemotron-3-Nano-30B-A3B's architecture (Mamba2, relu² MoE, attention without RoPE), its
# first --layers layers, model model_nemotron_h; no skewed runs, no HF eager run (grouped_mm and compile only).
# --family qwen3_next: Qwen3-Next-80B-A3B's widths (Gated DeltaNet and gated attention, 512 experts top-10), its first
# --layers layers, model model_qwen3_next; no skewed runs, no HF eager run. transformers runs its Gated DeltaNet with
# whatever the machine has: FLA's kernels where flash-linear-attention is installed, its torch fallback otherwise.
# transformers runs its PyTorch Mamba2 path where the mamba_ssm / causal_conv1d kernels are missing:
# hf_train.py records whether they are installed ("mamba2_kernels_installed"); transformers logs each fallback.
# Makes the reference model (balanced and skewed routing) and the token data under $BENCH_SCRATCH, then runs,
# each in its own process and one after another: HF grouped_mm, HF grouped_mm + torch.compile, HF eager,
# moetune; then, on the skewed model, moetune and HF grouped_mm. bench/report.py prints one table and writes
# results.json + results.md. Everything that should come back (results, per-run JSON/metrics, logs) goes to
# $OUT (the device tool's folder), or bench/results/<time> where $OUT is unset.
#
# Environment: MOETUNE (binary; default build/src/moetune/moetune), PYTHON (default python3), BENCH_SCRATCH
# (models, data, moetune's output; default /tmp/moetune-bench), MOETUNE_SET (extra --set overrides for moetune,
# space-separated, e.g. "output.save_final=false"). --tiny --device cpu runs the whole harness on a CPU
# (moetune then trains in fp32 on the CPU engine).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

quick=0; grouped=1; compile=1; eager=1; skew=1; hf=1; moetune=1; layers=4; tiny=0; device=cuda; micro_batch=2; family=qwen3_moe
peers=0; pairs=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-grouped) grouped=0 ;;  # leaves out HF grouped_mm (without compile) on the balanced model
    --no-compile) compile=0 ;;
    --no-eager) eager=0 ;;
    --no-skew) skew=0 ;;
    --no-hf) hf=0 ;;
    --no-moetune) moetune=0 ;;
    --layers) layers="$2"; shift ;;
    --micro-batch) micro_batch="$2"; shift ;;
    --tiny) tiny=1 ;;
    --device) device="$2"; shift ;;
    --family) family="$2"; shift ;;
    --peers) peers=1 ;;
    --pairs) pairs="$2"; shift ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --pairs '$pairs' is not a whole number of at least 1" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
MOETUNE=${MOETUNE:-build/src/moetune/moetune}
SCRATCH=${BENCH_SCRATCH:-/tmp/moetune-bench}
OUT=${OUT:-bench/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$SCRATCH" "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
MANIFEST="$OUT/runs.jsonl"
: > "$MANIFEST"

# Steps per run: enough after warm-up for a stable median, few enough to keep the full run near 6 minutes
# of device time (compile alone is ~40 s, an eager step ~0.9 s).
seq=4096
if [[ $quick == 1 ]]; then
  hf_steps=6;  hf_warmup=2;  compile_steps=8;  compile_warmup=4; eager_steps=3; eager_warmup=1; mt_steps=6;  mt_warmup=2
else
  hf_steps=20; hf_warmup=3;  compile_steps=15; compile_warmup=5; eager_steps=6; eager_warmup=2; mt_steps=20; mt_warmup=3
fi
model_flags=(--layers "$layers" --family "$family")
hf_flags=()
model_name=model
case "$family" in
  qwen3_moe) ;;
  gpt_oss) model_name=model_gpt_oss; skew=0; hf_flags+=(--attn eager) ;;
  moonlight|deepseek_v3|glm4_5_air|glm4_7_flash) model_name=model_$family; skew=0 ;;  # the hot-expert calibration is Qwen3-MoE's
  nemotron_h|qwen3_next) model_name=model_$family; skew=0; eager=0 ;;
  *) echo "run.sh: unknown --family '$family' (qwen3_moe, gpt_oss, moonlight, deepseek_v3, glm4_5_air, glm4_7_flash, nemotron_h or qwen3_next)" >&2; exit 2 ;;
esac
moetune_sets=()
if [[ $tiny == 1 ]]; then
  seq=256; model_flags+=(--tiny)
fi
if [[ $device == cpu ]]; then
  moetune_sets+=(--set training.device=cpu --set optimizer.precision=fp32)  # the CPU engine trains in fp32
fi
inspect_flags=()  # the plan of the keys that change it
for assignment in ${MOETUNE_SET:-}; do
  moetune_sets+=(--set "$assignment")
  [[ $assignment == training.lm_head_chunk_rows=* ]] && inspect_flags+=(--lm-head-chunk-rows "${assignment#*=}")
done

log() { echo "[bench $(date +%H:%M:%S)] $*"; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  echo "options: family=$family quick=$quick layers=$layers tiny=$tiny device=$device seq=$seq micro_batch=$micro_batch"
  "$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "| transformers", transformers.__version__,
"| cuda", torch.version.cuda, "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# A model folder is reused when a finished one with the same options is already in the scratch folder.
make_model() {  # NAME SKEW
  local dir="$SCRATCH/$1"
  if [[ -f $dir/bench_routing.json ]] && "$PYTHON" - "$dir" "$2" "$layers" "$tiny" "$family" <<'PY'
import json, sys
info = json.load(open(sys.argv[1] + "/bench_routing.json"))
same = (info["skew"], info["layers"], info["tiny"], info.get("family", "qwen3_moe"))
sys.exit(0 if same == (sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]) else 1)
PY
  then
    log "reusing $dir"
  else
    rm -rf "$dir"
    log "making $1 (skew $2)"
    "$PYTHON" bench/make_reference_model.py "$dir" --skew "$2" "${model_flags[@]}" > "$OUT/logs/make_$1.log" 2>&1 \
      || { cat "$OUT/logs/make_$1.log"; log "could not make the model"; exit 1; }
  fi
  grep -E "expert load|hot share" "$OUT/logs/make_$1.log" 2> /dev/null | tail -n 1
  cp "$dir/bench_routing.json" "$OUT/routing_$1.json"
  cp "$dir/config.json" "$OUT/config_$1.json"  # report.py counts FLOPs from it, also where the model is gone
}

# One line per run in runs.jsonl: what report.py needs to read its result. Paths are relative to $OUT, so the
# folder can be read again anywhere it is copied to. `pair`: which (HF grouped_mm, moetune) pair a run belongs to
# (--pairs; 1 for every run outside the later pairs).
pair=1
record() {  # LABEL RUNNER ROUTING RESULT MODEL_NAME WARMUP RC SECONDS LOG
  printf '{"label": "%s", "runner": "%s", "routing": "%s", "pair": %d, "result": "%s", "model_config": "config_%s.json", "model_dir": "%s", "seq": %d, "micro_batch": %d, "warmup": %d, "rc": %d, "wall_seconds": %d, "log": "%s"}\n' \
    "$1" "$2" "$3" "$pair" "$4" "$5" "$SCRATCH/$5" "$seq" "$micro_batch" "$6" "$7" "$8" "$9" >> "$MANIFEST"
}

run_hf() {  # LABEL ROUTING MODEL_NAME STEPS WARMUP EXTRA...
  local label=$1 routing=$2 model=$3 steps=$4 warmup=$5; shift 5
  local name=${label//[^A-Za-z0-9]/_}
  [[ $pair -gt 1 ]] && name+="_pair$pair"
  log "$label: $steps steps"
  local start=$SECONDS
  "$PYTHON" bench/hf_train.py "$SCRATCH/$model" "$DATA" --micro-batch "$micro_batch" --seq "$seq" --steps "$steps" \
    --warmup "$warmup" --device "$device" --label "$label" --json "$OUT/$name.json" "${hf_flags[@]}" "$@" \
    > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/logs/$name.log"
  record "$label" hf "$routing" "$name.json" "$model" "$warmup" "$rc" "$((SECONDS - start))" "logs/$name.log"
}

run_moetune() {  # LABEL ROUTING MODEL_NAME
  local label=$1 routing=$2 model=$3
  local name=${label//[^A-Za-z0-9]/_}
  [[ $pair -gt 1 ]] && name+="_pair$pair"
  local output="$SCRATCH/output_$name"
  rm -rf "$output"
  log "$label: $mt_steps steps"
  local start=$SECONDS
  "$MOETUNE" finetune -c bench/reference_job.yaml --set model="$SCRATCH/$model" --set data.train="$DATA" \
    --set output.dir="$output" --set training.max_steps="$mt_steps" --set data.max_length="$seq" \
    --set training.micro_batch_size="$micro_batch" "${moetune_sets[@]}" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/logs/$name.log"
  cp "$output/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2> /dev/null || : > "$OUT/$name.metrics.jsonl"
  cp "$output/profile.json" "$OUT/$name.profile.json" 2> /dev/null || :  # training.profile=true in MOETUNE_SET
  # The memory plan moetune prints before a run, for the report to set beside the measured peak.
  "$MOETUNE" inspect "$SCRATCH/$model" --tokens "$((seq * micro_batch))" "${inspect_flags[@]}" --json > "$OUT/$name.plan.json" 2>> "$OUT/logs/$name.log" ||
    rm -f "$OUT/$name.plan.json"
  rm -rf "$output"  # the final checkpoint (weights + AdamW state, ~25 GB at 4 layers) is not part of the result
  record "$label" moetune "$routing" "$name.metrics.jsonl" "$model" "$mt_warmup" "$rc" "$((SECONDS - start))" "logs/$name.log"
}

# The peers' wheels: Liger into its own folder (it runs on the machine's transformers), NeMo's three into another
# (NEMO_SITE: bench/nemo_train.py puts it first on the path, so the HF runs keep transformers 5.17).
install_peer() {  # FOLDER WHEEL_PATTERN...
  local folder=$1; shift
  local wheels=()
  for pattern in "$@"; do
    local found=(.whl/$pattern)
    [[ -f ${found[0]} ]] || { log "--peers: no wheel .whl/$pattern (bench/README.md says how to fetch it)"; return 1; }
    wheels+=("${found[0]}")
  done
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$folder" "${wheels[@]}" \
    > "$OUT/logs/install_$(basename "$folder").log" 2>&1 || { log "--peers: installing ${wheels[*]} failed"; return 1; }
}

run_nemo() {  # LABEL ROUTING MODEL_NAME STEPS WARMUP
  local label=$1 routing=$2 model=$3 steps=$4 warmup=$5
  local name=${label//[^A-Za-z0-9]/_}
  log "$label: $steps steps"
  local start=$SECONDS
  # TERM first: torchrun passes it on to its worker, which a KILL of torchrun alone would leave holding the GPU.
  NEMO_SITE=$SCRATCH/nemo-site TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 timeout -k 15 300 \
    torchrun --nproc-per-node 1 bench/nemo_train.py "$SCRATCH/$model" "$DATA" --ep-size 1 --micro-batch "$micro_batch" \
    --seq "$seq" --steps "$steps" --warmup "$warmup" --label "$label" --json "$OUT/$name.json" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/logs/$name.log"
  record "$label" nemo "$routing" "$name.json" "$model" "$warmup" "$rc" "$((SECONDS - start))" "logs/$name.log"
}

if [[ $moetune == 1 && ! -x $MOETUNE ]]; then
  log "no moetune binary at $MOETUNE (set MOETUNE=...): moetune runs skipped"; moetune=0
fi

make_model "$model_name" none
[[ $skew == 1 ]] && make_model model_hot hot
vocab=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1] + "/config.json"))["vocab_size"])' "$SCRATCH/$model_name")
max_steps=$(printf '%s\n' "$hf_steps" "$compile_steps" "$eager_steps" "$mt_steps" | sort -n | tail -n 1)
DATA="$SCRATCH/data_${seq}.jsonl"
"$PYTHON" bench/make_data.py "$DATA" --tokens-per-seq "$seq" --sequences $(( max_steps * micro_batch )) --vocab "$vocab" \
  > "$OUT/logs/make_data.log" 2>&1 || { cat "$OUT/logs/make_data.log"; exit 1; }

if [[ $hf == 1 ]]; then
  [[ $grouped == 1 ]] && run_hf "HF grouped_mm" balanced "$model_name" "$hf_steps" "$hf_warmup" --experts grouped_mm
  [[ $compile == 1 ]] && run_hf "HF grouped_mm + compile" balanced "$model_name" "$compile_steps" "$compile_warmup" --experts grouped_mm --compile
  [[ $eager == 1 ]] && run_hf "HF eager" balanced "$model_name" "$eager_steps" "$eager_warmup" --experts eager
fi
if [[ $peers == 1 ]]; then
  install_peer "$SCRATCH/liger-site" "liger_kernel-0.8.5-*.whl" &&
    PYTHONPATH=$SCRATCH/liger-site${PYTHONPATH:+:$PYTHONPATH} run_hf "HF grouped_mm + Liger" balanced "$model_name" \
      "$hf_steps" "$hf_warmup" --experts grouped_mm --liger
  install_peer "$SCRATCH/nemo-site" "nemo_automodel-0.7.0-*.whl" "transformers-5.18.0-*.whl" "torchao-0.18.0-*.whl" &&
    run_nemo "NeMo AutoModel" balanced "$model_name" "$compile_steps" "$compile_warmup"
fi
[[ $moetune == 1 ]] && run_moetune "moetune" balanced "$model_name"
if [[ $skew == 1 ]]; then
  [[ $moetune == 1 ]] && run_moetune "moetune skewed" skewed model_hot
  [[ $hf == 1 ]] && run_hf "HF grouped_mm skewed" skewed model_hot "$hf_steps" "$hf_warmup" --experts grouped_mm
fi
for ((pair = 2; pair <= pairs; pair++)); do
  [[ $hf == 1 && $grouped == 1 ]] && run_hf "HF grouped_mm" balanced "$model_name" "$hf_steps" "$hf_warmup" --experts grouped_mm
  [[ $moetune == 1 ]] && run_moetune "moetune" balanced "$model_name"
done
pair=1

"$PYTHON" bench/report.py "$MANIFEST" --out "$OUT"
log "results in $OUT"
