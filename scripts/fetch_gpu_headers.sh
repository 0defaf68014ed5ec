#!/usr/bin/env bash
# Fetches the header-only GPU libraries that Debian does not package, pinned by version, into .deps/
# (git-ignored): CUTLASS (Hopper grouped GEMM) from the nvidia-cutlass wheel, and cudnn-frontend (the cuDNN
# graph API, for flash attention) from the nvidia-cudnn-frontend wheel. Each wheel is a zip; only its C++
# headers are kept. Safe to run again: a version already unpacked is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
CUTLASS_VERSION=4.2.0.0
CUDNN_FRONTEND_VERSION=1.16.0
deps=.deps
mkdir -p "$deps"

fetch() {  # package version destination subfolder-in-wheel
  local package=$1 version=$2 destination=$3 inner=$4
  [ -f "$destination/.complete" ] && return 0
  local scratch
  scratch=$(mktemp -d)
  echo "fetch_gpu_headers: $package==$version"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    --platform any -d "$scratch" "$package==$version"
  rm -rf "$destination" && mkdir -p "$destination"
  python3 - "$scratch"/*.whl "$inner" "$destination" <<'PY'
import sys, zipfile, pathlib
wheel, inner, destination = sys.argv[1], sys.argv[2].rstrip('/') + '/', pathlib.Path(sys.argv[3])
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(inner) and not n.endswith('/')]
    if not names:
        sys.exit(f"fetch_gpu_headers: {wheel} has no {inner}")
    for name in names:
        target = destination / 'include' / name[len(inner):]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
PY
  rm -rf "$scratch"
  touch "$destination/.complete"
}

fetch nvidia-cutlass "$CUTLASS_VERSION" "$deps/cutlass-$CUTLASS_VERSION" cutlass_library/source/include
fetch nvidia-cudnn-frontend "$CUDNN_FRONTEND_VERSION" "$deps/cudnn-frontend-$CUDNN_FRONTEND_VERSION" include
