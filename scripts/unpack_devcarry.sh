#!/usr/bin/env bash
# There (the GPU machine): restores the libraries scripts/stage_gpu_binaries.sh compressed to fit the carry limit.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import lzma, pathlib
for path in pathlib.Path(".devcarry").glob("*.xz"):
    target = path.with_suffix("")
    if not target.exists():
        target.write_bytes(lzma.decompress(path.read_bytes()))
PY
