#!/usr/bin/env bash
# The transformers reference on a machine without a GPU (the dev machine reaches PyPI only): torch 2.11.0 (PyPI's
# Linux wheel, CUDA-enabled, runs on the CPU), transformers 5.17.0 (the GPU machine's) and PEFT 0.21.2 (it has 0.21.0), in a
# virtual environment outside the checkout (~5 GB, ~3 minutes). tests/reference/*.py run under it:
#   bash scripts/reference_env.sh && /work/refenv/bin/python tests/reference/sweep_config_parity.py build/src/moetune/moetune
set -euo pipefail
env_dir=${REFENV:-/work/refenv}
if ! "$env_dir/bin/python" -c "import torch, transformers, peft" 2>/dev/null; then
  python3 -m venv "$env_dir"
  "$env_dir/bin/pip" install -q torch==2.11.0 transformers==5.17.0 peft==0.21.2 safetensors
fi
"$env_dir/bin/python" -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
