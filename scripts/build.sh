#!/usr/bin/env bash
# Configures and builds one flavour: `release` (default; CUDA too when nvcc is found) into build/, or
# `asan` (AddressSanitizer + UndefinedBehaviorSanitizer, CPU only) into build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
case "$flavour" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DMOETUNE_SANITIZE=ON) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release or asan)" >&2; exit 2 ;;
esac
# The GPU build needs the pinned header-only libraries (CUTLASS, cudnn-frontend).
if [ "$flavour" = release ] && command -v nvcc >/dev/null; then scripts/fetch_gpu_headers.sh; fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir"
