# Sourced by the GPU machine's scripts (gpu_check.sh, gpu_parallel_check.sh) from the repository root, after
# scripts/stage_gpu_binaries.sh here: links /work/main to this checkout (the tests hold the dev checkout's
# absolute fixture paths), unpacks the carried libraries, puts the binaries under build/, sets the library path
# and keeps NVLink multicast off (KINDS.md). Sets `repo`, `out` (from $OUT, else $1) and records the device.
repo=$PWD
out=${OUT:-$1}
mkdir -p "$out"
[ -e /work/main ] || { mkdir -p /work && ln -s "$repo" /work/main; }
bash scripts/unpack_devcarry.sh
mkdir -p build/src/moetune build/tests
cp .devcarry/moetune build/src/moetune/moetune
[ -f .devcarry/moetune_tests ] && cp .devcarry/moetune_tests build/tests/moetune_tests
chmod +x build/src/moetune/moetune build/tests/moetune_tests 2>/dev/null  # xz-restored files lose the x bit
nvidia_libs=$(python3 -c "import glob,os,nvidia;print(':'.join(glob.glob(os.path.dirname(nvidia.__path__[0])+'/nvidia/*/lib')))")
export LD_LIBRARY_PATH=$repo/.devcarry:$nvidia_libs:/usr/local/cuda/lib64
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
git -C "$repo" log -1 --format='commit %H %s' 2>/dev/null | tee -a "$out/device.txt"
