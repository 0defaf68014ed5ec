#!/usr/bin/env bash
# The main job: `moetune finetune` on its embedded default. A bundled tiny Qwen3-MoE (161K parameters, its own
# tokenizer and chat template) learns to answer "Which is larger, 47 or 52?"; held-out accuracy is measured before
# and after, and the trained model is saved as an HF folder under moetune-default-run/. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
build/src/moetune/moetune finetune
