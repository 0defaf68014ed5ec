#!/usr/bin/env bash
# Here (the dev machine): copies the release binaries, stripped, and the shared libraries the GPU machine's
# image lacks into .devcarry/ (git-ignored), for the device tool to carry: run(..., carry=[".devcarry"]).
# Building there is not possible: its image has nvcc and cmake but not the Debian -dev packages.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry
cp build/src/moetune/moetune build/tests/moetune_tests .devcarry/
strip --strip-all .devcarry/moetune .devcarry/moetune_tests
# The kernel timeline tool (bench/kernel_trace), where CUPTI was found.
[ -f build/libkernel_trace.so ] && cp build/libkernel_trace.so .devcarry/
# Every library the binaries need except the C/C++ runtime and CUDA's own (the GPU machine has those, CUDA's
# from /usr/local/cuda and the nvidia pip packages).
for library in $(ldd build/tests/moetune_tests | awk '$3 ~ /^\// {print $3}' |
                 grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux[^/]*)\.so|/libcu|/libnv|/libnccl'); do
  cp -L "$library" .devcarry/
done
# The carry limit is 64 MiB with the checkout (and helpers' binaries may travel beside these): every file over
# 1 MiB (the binaries, OpenBLAS) travels xz-compressed, ~3x smaller, and scripts/unpack_devcarry.sh restores it there.
python3 - <<'PY'
import lzma, os, pathlib
for path in pathlib.Path(".devcarry").iterdir():
    if path.stat().st_size > 1 << 20:
        path.with_name(path.name + ".xz").write_bytes(lzma.compress(path.read_bytes(), preset=6))
        path.unlink()
PY
du -sh .devcarry
