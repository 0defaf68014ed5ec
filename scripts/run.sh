#!/usr/bin/env bash
# The main job. Until `moetune finetune` exists it inspects the bundled tiny Qwen3-MoE model: architecture,
# layer kinds, shapes, parameter counts and the memory a full fine-tune needs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
build/src/moetune/moetune inspect tests/fixtures/qwen3_moe_tiny
