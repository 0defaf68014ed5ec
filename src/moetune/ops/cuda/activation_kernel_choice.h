// The SwiGLU launchers with the kernel shape named instead of picked: for the GPU tests that check the shapes
// give the same bits and time them against each other (tests/gpu/test_gated_packs_gpu.cpp). The engine calls
// the plain launchers of activation_kernels.h, which take kDefaultGatedKernel on the 16-byte path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// The 16-byte path's kernel (the scalar path of odd widths and misaligned views is the one-pack kernel at one
// element, whatever this says). packs 0: one 16-byte pack of each operand a thread, a thread per pack (the kernel
// before session 12); 1, 2 or 4: that many packs a thread, every load issued before the first pack's math
// (ops/cuda/gated_packs.cuh). resident (packs > 0): as many blocks as fit the GPU at once, striding over the
// tiles, instead of a block per tile. staged (packs > 0, resident implied): the next tile's packs copied into
// shared memory while the current one's are computed (ops/cuda/gated_staged.cuh). reversed (packs > 0): the tiles
// from the last back to the first, where the producer of the input (a GEMM) may have left its last tiles in L2.
struct GatedKernel {
  int packs = 0;
  bool resident = false;
  bool staged = false;
  bool reversed = false;
};

// What the plain launchers run (measured: docs/benchmarks.md, session 12).
inline constexpr GatedKernel kDefaultGatedKernel{2, true, true, true};

// clamped false: SwiGLU (alpha and limit unused); true: GPT-OSS's clamped SwiGLU. Otherwise the plain launchers'
// arguments; cudaErrorInvalidValue for packs other than 0, 1, 2, 4.
cudaError_t launch_gated_forward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* gate_up,
                                      void* out, int64_t rows, int64_t inner, cudaStream_t stream);
cudaError_t launch_gated_backward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* dout,
                                       const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                       int64_t inner, cudaStream_t stream);

}  // namespace moetune::ops::cuda
