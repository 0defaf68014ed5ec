// Launchers of the Gated DeltaNet recurrence (ops/gated_delta_rule.h semantics) on the GPU: raw pointers in, a CUDA
// status out. Free of the engine's host headers so that .cu files compile without fmt; ops/cuda/gated_delta_rule.cpp
// wraps them for Tensors.
//
// The N rows are one long sequence of tokens; document starts restart the state wherever they fall (row 0 always
// does unless a generation `state` is given). q, k, v, a, b are BF16 read through row strides (they stay inside the
// conv's and in_proj's outputs); dt_bias and A_log are BF16 or F32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moetune/ops/cuda/mamba2_scan_kernels.h"  // StridedBf16

namespace moetune::ops::cuda {

// The widest key and value heads the kernels take (Qwen3-Next and Qwen3.5 use 128 for both).
inline constexpr int64_t kGatedDeltaMaxHeadDim = 256;

struct GatedDeltaDims {
  int64_t rows = 0, k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
};

struct GatedDeltaPointers {
  StridedBf16 q, k, v, a, b;        // [N, Hk·Dk], [N, Hk·Dk], [N, Hv·Dv], [N, Hv], [N, Hv]
  const void *dt_bias, *a_log;      // [Hv] each
  bool params_bf16 = true;          // else F32
  const uint8_t* starts = nullptr;  // [N], 1 where a document begins; null: none
  // F32 [Hv, Dk, Dv] or null: the state entering row 0, which row 0 continues (unless starts[0]), overwritten by the
  // forward pass with the state after the last row (generation's prompt).
  float* state = nullptr;
};

// The gradients: the inputs' (BF16, strided, written) and the per-head parameters' (added into, BF16 or F32 of one
// dtype; null: frozen).
struct GatedDeltaGradPointers {
  StridedBf16 q, k, v, a, b;
  void *dt_bias = nullptr, *a_log = nullptr;
  bool grads_bf16 = false;
};

// The largest dynamic shared memory a kernel of the op needs, to compare with the device's limit.
size_t gated_delta_rule_shared_bytes(const GatedDeltaDims& dims);

// Scratch for one forward call, and for one backward call.
size_t gated_delta_rule_forward_workspace_bytes(const GatedDeltaDims& dims);
size_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaDims& dims);

// Rows where `starts` is set that the recurrence may be split at: the state walks over the rows between two of
// them in parallel (a micro-batch's sequences, a packed batch's documents). Any subset of the set rows is correct;
// none (or a generation state, which one walk carries from row 0 to the end): one walk over all N rows.
struct GatedDeltaSplits {
  const int64_t* rows = nullptr;  // ascending, host memory
  int64_t count = 0;
};

cudaError_t launch_gated_delta_rule_forward(const GatedDeltaDims& dims, const GatedDeltaPointers& in, StridedBf16 out,
                                            GatedDeltaSplits splits, void* workspace, cudaStream_t stream);

// Given dout [N, Hv·Dv]: the inputs' gradients and the parameters' (row 0 starts from zeros; in.state is ignored).
cudaError_t launch_gated_delta_rule_backward(const GatedDeltaDims& dims, const GatedDeltaPointers& in, StridedBf16 dout,
                                             const GatedDeltaGradPointers& grads, GatedDeltaSplits splits,
                                             void* workspace, cudaStream_t stream);

}  // namespace moetune::ops::cuda
