// The SwiGLU launchers with the kernel shape named instead of picked: for the GPU tests that check the shapes
// give the same bits and time them against each other (tests/gpu/test_gated_packs_gpu.cpp). The engine calls
// the plain launchers of activation_kernels.h, which take kDefaultGatedKernel on the 16-byte path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// The 16-byte path's kernel (the scalar path of odd widths and misaligned views is the one-pack kernel at one
// element, whatever this says). packs 0: one 16-byte pack of each operand a thread, a thread per pack (the kernel
// before session 12); 1, 2 or 4: that many packs a thread, on a resident grid, the next tile's packs copied into
// shared memory while the current one's are computed (ops/cuda/gated_staged.cuh). reversed (packs > 0): the tiles
// from the last back to the first, where the producer of the input (a GEMM) may have left its last tiles in L2.
struct GatedKernel {
  int packs = 0;
  bool reversed = false;
};

// What the plain launchers run. Session 12 (H200, call C): in Moonlight's step (kernel trace, 3 steps each, same
// call) its 14 SwiGLU launches took 1.835 ms a step against the one-pack kernel's 1.920 (routed experts forward
// 112-118 us against 122-125, backward 223-225 against 237-247, the dense layer's forward 155 against 168, its
// backward and the shared experts' even). In isolation (GatedPacksGpu.DISABLED_TimesMoonlightShapes) it is no
// faster than the one-pack kernel back to back (routed forward 114.5 against 109.4 us, backward 234.5 against
// 217.3), about even right after a producer writes its input (113.0 against 112.4; 222.6 against 218.4): the gain
// is in the step's conditions (the power cap's lower clocks, the producer's tiles in L2), which a trace shows and
// an isolated timing does not. Kernels holding the packs in registers instead were slower everywhere but the
// backward at one pack (214.6 against 217.3 us back to back; not run in the step), and were taken out.
inline constexpr GatedKernel kDefaultGatedKernel{2, true};

// clamped false: SwiGLU (alpha and limit unused); true: GPT-OSS's clamped SwiGLU. Otherwise the plain launchers'
// arguments; cudaErrorInvalidValue for packs other than 0, 1, 2, 4.
cudaError_t launch_gated_forward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* gate_up,
                                      void* out, int64_t rows, int64_t inner, cudaStream_t stream);
cudaError_t launch_gated_backward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* dout,
                                       const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                       int64_t inner, cudaStream_t stream);

}  // namespace moetune::ops::cuda
