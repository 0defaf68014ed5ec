#!/usr/bin/env bash
# There (the 2-GPU machine, kind nvidia-h200-x2), from the repository root, with NeMo's wheels in .whl/:
#   run(command="bash scripts/gpu_nemo_bench.sh", carry=[".whl"], kind="nvidia-h200-x2")
# or after the moetune and HF runs in the same command (they share the inputs):
#   run(command="bash scripts/gpu_parallel_check.sh bench; bash scripts/gpu_nemo_bench.sh", carry=[".devcarry", ".whl"], ...)
# Issue 10's benchmark, NVIDIA NeMo AutoModel 0.7.0's row: bench/nemo_train.py under torchrun on both GPUs with
# ep_size 2, then 1 (NEMO_EP_SIZES="2 1"), on the 8-layer cut of Qwen3-30B-A3B, seq 4096, micro-batch 2 per GPU,
# the same model and data as gpu_parallel_check.sh's bench step (/tmp/moetune-parallel; made if missing).
# The wheels (nemo_automodel 0.7.0, transformers 5.18.0, torchao 0.18.0) go to their own folder, /tmp/nemo-site,
# so that the machine's transformers 5.17 stays the one the HF runs import; nemo_train.py puts that folder first.
# NEMO_ARGS adds options to every run (e.g. --no-compile-attn if torch.compile fails there). Each run is cut at
# 240 s; with the install and the inputs made, both runs take up to ~9 minutes of the 10 a command may run, so
# after other work in the same command set NEMO_EP_SIZES=2. One line per run; logs and JSON go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/gpu_nemo_bench}
scratch=/tmp/moetune-parallel
site=/tmp/nemo-site
mkdir -p "$out" "$scratch"
# KINDS.md: NVLink multicast stays off on this machine, in every program started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 NEMO_SITE=$site

wheels=(.whl/nemo_automodel-0.7.0-*.whl .whl/transformers-5.18.0-*.whl .whl/torchao-0.18.0-*.whl)
for wheel in "${wheels[@]}"; do
  [ -f "$wheel" ] || { echo "gpu_nemo_bench.sh: $wheel is missing: download the wheels into .whl/ (bench/README.md) and carry .whl"; exit 1; }
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}" \
  || { echo "gpu_nemo_bench.sh: installing ${wheels[*]} into $site failed"; exit 1; }

source scripts/bench8_inputs.sh
make_bench8_inputs || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

for ep in ${NEMO_EP_SIZES:-2 1}; do
  name=bench_nemo_ep$ep
  rm -f "$out/$name.json"
  # TERM first: torchrun passes it on to its workers, which a KILL of torchrun alone would leave holding the GPUs.
  # shellcheck disable=SC2086 # NEMO_ARGS is a list of options
  timeout -k 15 240 torchrun --nproc-per-node 2 bench/nemo_train.py "$model" "$data" --ep-size "$ep" \
    --micro-batch 2 --seq 4096 --steps 10 --warmup 3 --json "$out/$name.json" ${NEMO_ARGS:-} > "$out/$name.log" 2>&1
  rc=$?
  python3 - "$out/$name.json" "$rc" "$ep" <<'PY' || tail -n 15 "$out/$name.log"
import json, sys
path, rc, ep = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    r = json.load(open(path))
except OSError:
    print(f"NeMo EP={ep} + FSDP2, 2 GPUs: no result (rc={rc}); the log's end:")
    sys.exit(1)
if r.get("status") != "ok":
    print(f"NeMo EP={ep} + FSDP2, 2 GPUs: {r.get('status')} at step {r.get('failed_step')} (rc={rc}): {r.get('error')}")
    sys.exit(1)
print(f"NeMo EP={ep} + FSDP2, 2 GPUs: {r['tokens_per_second']:,.0f} tokens/s per GPU, peak {r['peak_allocated_bytes'] / 1e9:.1f} GB, "
      f"median step {r['step_seconds_median']:.3f} s, loss step 1 {r['losses'][0]:.4f} (all ranks {r['global_losses'][0]:.4f}), "
      f"compile_attn={r['nemo_backend']['compile_attn']}, transformers {r['versions']['transformers']} (rc={rc})")
PY
done
