#!/bin/bash
# The LoRA benchmark of issue 12 on one H200, in one run: the whole Qwen3-30B-A3B architecture (48 layers, random
# weights written here: 61 GB of bf16, to /dev/shm and, past its room, to local disk), LoRA rank 16, alpha 32 on
# q/k/v/o and the experts, seq 4096, micro-batch 1, pure bf16 AdamW lr 1e-4, aux loss on: moetune with LoRA
# (training.recompute as RECOMPUTE, default experts; with the last KEEP layers kept, then none) and QLoRA (NF4
# base, QLORA_RECOMPUTE, default full; then with int8 AdamW state), then HF + PEFT (bench/peft_train.py: the model
# built from the config on the GPU, gradient checkpointing). Each part timed; the table at the end
# (bench/lora_table.py). The weights are removed at the end (they live in RAM).
#   OUT=dir MOETUNE=path bench/lora48.sh        (PEFT_WHEELS=dir of wheels if peft is missing)
# RUNS picks moetune's runs, in order (default "qlora lora_keep lora qlora_lean"); HF=0 skips HF + PEFT, and
# HF_REFERENCE="TOKENS_PER_S,PEAK_GB,LABEL" puts an earlier HF + PEFT measurement in the table instead.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/lora48-out}
moetune=${MOETUNE:-build/src/moetune/moetune}
scratch=${SCRATCH:-/tmp/lora48}
shm=/dev/shm/lora48
steps=${STEPS:-6}
mkdir -p "$out" "$scratch"
trap 'rm -rf "$shm" "$scratch/shards"' EXIT
start=$(date +%s)
mark() { echo "[$(($(date +%s) - start)) s] $*"; }

if [ -n "${PEFT_WHEELS:-}" ] && ! python3 -c "import peft" 2>/dev/null; then  # the import alone takes ~15 s
  mkdir -p /tmp/peft-site
  for w in "$PEFT_WHEELS"/*.whl; do
    name=$(basename "$w" | cut -d- -f1)
    python3 -c "import $name" 2>/dev/null || python3 -m zipfile -e "$w" /tmp/peft-site
  done
  export PYTHONPATH=/tmp/peft-site${PYTHONPATH:+:$PYTHONPATH}
fi
echo "room: $(df -h --output=avail /dev/shm | tail -1) in /dev/shm, $(df -h --output=avail "$scratch" | tail -1) on disk, $(free -g | awk '/Mem/ {print $7}') GB RAM available"

model=$scratch/model48
mark "writing the model"
python3 $here/make_random_checkpoint.py "$model" --layers 48 --dirs "$shm" "$scratch/shards" 2>&1 | tail -2
python3 $here/make_data.py "$scratch/data.jsonl" --tokens-per-seq 4096 --sequences 16 --vocab 151936 > /dev/null 2>&1
lora=(--set lora.rank=16 --set lora.alpha=32 --set "lora.target_modules=[q_proj, k_proj, v_proj, o_proj]"
      --set "lora.target_parameters=[mlp.experts.gate_up_proj, mlp.experts.down_proj]")
run_moetune() {  # LABEL RECOMPUTE QUANTIZE [more finetune arguments]
  local label=$1 recompute=$2 quantize=$3
  shift 3
  rm -rf "$scratch/$label"
  mark "moetune $label (recompute $recompute, base $quantize $*)"
  timeout -s KILL ${MOETUNE_LIMIT:-100} "$moetune" finetune -c $here/reference_job.yaml --set model=$model --set data.train=$scratch/data.jsonl \
    --set training.micro_batch_size=1 --set training.max_steps=$steps --set optimizer.lr=1e-4 --set training.profile=true \
    --set training.recompute=$recompute --set lora.quantize=$quantize "${lora[@]}" "$@" --set output.dir=$scratch/$label \
    > "$out/$label.log" 2>&1
  echo "  rc=$?; $(grep -c '^step' "$out/$label.log") step lines"
  grep -E '^step (1|'$steps')/|error|Error|planned|^QLoRA:' "$out/$label.log" | head -6
  grep -A16 '^profile' "$out/$label.log" | head -18
  cp "$scratch/$label/metrics.jsonl" "$out/$label.metrics.jsonl" 2>/dev/null
}
elapsed() { echo $(($(date +%s) - start)); }
for run in ${RUNS:-qlora lora_keep lora qlora_lean}; do
  case $run in
    qlora) run_moetune qlora "${QLORA_RECOMPUTE:-full}" nf4 ;;
    # LoRA with the experts recomputed, the last KEEP layers keeping their stash (the memory left under HF +
    # PEFT's peak spent on speed), then without keeping any, and QLoRA at its leanest, as time allows.
    lora_keep) run_moetune lora_keep "${RECOMPUTE:-experts}" none --set training.recompute_keep_layers=${KEEP:-10} ;;
    lora) [ $(elapsed) -lt ${LORA_BEFORE:-175} ] && run_moetune lora "${RECOMPUTE:-experts}" none ;;
    # 8-bit AdamW state and the update in the backward pass (so no clipping, which needs every gradient first):
    # the adapters' optimizer state and gradients are most of what is left beside the NF4 base.
    qlora_lean) [ $(elapsed) -lt ${LEAN_BEFORE:-215} ] &&
      run_moetune qlora_lean full nf4 --set optimizer.state=int8 --set optimizer.update_in_backward=on --set optimizer.max_grad_norm=0 ;;
    *) echo "lora48.sh: unknown run '$run'" >&2 ;;
  esac
done
rm -rf "$shm" "$scratch/shards"
if [ "${HF:-1}" = 1 ]; then
  mark "HF + PEFT"
  timeout -s KILL ${HF_LIMIT:-120} python3 $here/peft_train.py --layers 48 --seq 4096 --steps ${HF_STEPS:-5} --warmup 2 --rank 16 --alpha 32 \
    --json "$out/hf_peft.json" > "$out/hf_peft.log" 2>&1
  echo "  rc=$?"; grep -E '^step|status' "$out/hf_peft.log" | cut -c1-300 | tail -7
fi
mark "done"
declare -A label=(
  [lora_keep]="moetune LoRA (recompute experts, the last ${KEEP:-10} layers kept)"
  [lora]="moetune LoRA (recompute ${RECOMPUTE:-experts})"
  [qlora]="moetune QLoRA, NF4 base (recompute ${QLORA_RECOMPUTE:-full})"
  [qlora_lean]="moetune QLoRA, int8 AdamW state, update in backward, no clipping (recompute full)")
rows=()
for run in ${RUNS:-qlora lora_keep lora qlora_lean}; do [ -n "${label[$run]:-}" ] && rows+=("${label[$run]}=$out/$run.metrics.jsonl"); done
python3 $here/lora_table.py --hf "$out/hf_peft.json" ${HF_REFERENCE:+--hf-reference "$HF_REFERENCE"} --moetune "${rows[@]}" |
  tee "$out/table.md"
