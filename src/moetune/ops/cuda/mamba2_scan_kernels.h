// Launchers of the chunked (SSD) Mamba2 scan: raw pointers in, a CUDA status out. Free of the engine's host
// headers so that .cu files compile without fmt; ops/cuda/mamba2_scan.cpp wraps them for Tensors.
//
// The N rows are one long sequence cut into chunks of `chunk` rows (the last may be shorter); document starts
// (row 0 always is one) restart the state, wherever they fall. Inputs are BF16 read through row strides (ld_*),
// so that x, B, C and dt can stay inside the mixer's wider projections; the per-head parameters are BF16 or F32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// The longest chunk_size the scan takes.
inline constexpr int64_t kMamba2MaxChunk = 256;

struct Mamba2ScanDims {
  int64_t rows = 0, heads = 0, head_dim = 0, groups = 1, state = 0, chunk = 0;
  float dt_min = 0, dt_max = 0;  // dt_max may be +inf

  int64_t chunks() const { return (rows + chunk - 1) / chunk; }
};

// A BF16 matrix read (or written) through a row stride, in elements.
struct StridedBf16 {
  void* data = nullptr;
  int64_t ld = 0;
};

struct Mamba2ScanPointers {
  StridedBf16 x, dt, b, c;              // [N, H·P], [N, H], [N, G·S], [N, G·S]
  const void *dt_bias, *a_log, *d;      // [H] each
  bool params_bf16 = true;              // else F32
  const uint8_t* starts = nullptr;      // [N], 1 where a document begins; null: none (row 0 still begins one
                                        // unless `state` is set)
  // F32 [H, P, S] or null: the state entering row 0, which row 0 continues (unless starts[0]), overwritten by the
  // forward pass with the state after the last row (generation's prompt, ops/cuda/mamba2_step.h).
  float* state = nullptr;
};

// The gradients: the inputs' (BF16, strided, written) and the per-head parameters' (added into, BF16 or F32;
// null: frozen).
struct Mamba2ScanGradPointers {
  StridedBf16 x, dt, b, c;
  void *dt_bias = nullptr, *a_log = nullptr, *d = nullptr;
  bool grads_bf16 = false;
};

// The largest dynamic shared memory a kernel of the scan needs, to compare with the device's limit.
size_t mamba2_scan_shared_bytes(const Mamba2ScanDims& dims);

// fp32 scratch for one forward call, and for one backward call (the forward's and its own).
size_t mamba2_scan_forward_workspace_bytes(const Mamba2ScanDims& dims);
size_t mamba2_scan_backward_workspace_bytes(const Mamba2ScanDims& dims);

cudaError_t launch_mamba2_scan_forward(const Mamba2ScanDims& dims, const Mamba2ScanPointers& in, StridedBf16 y,
                                       void* workspace, cudaStream_t stream);

cudaError_t launch_mamba2_scan_backward(const Mamba2ScanDims& dims, const Mamba2ScanPointers& in, StridedBf16 dy,
                                        const Mamba2ScanGradPointers& grads, void* workspace, cudaStream_t stream);

}  // namespace moetune::ops::cuda
