// Launchers of the attention-prep kernels (split of the fused QKV projection, per-head RMSNorm of q and k,
// rotate-half RoPE) and their backward: raw pointers in, a CUDA status out. Free of the engine's host headers so
// that .cu files compile without fmt; ops/cuda/qkv_rope.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// The shape of one call: qkv [tokens, (q_heads + gate_heads + 2·kv_heads)·head_dim], heads in the order q, k, v,
// with gate_heads heads' worth of columns between q's and k's that the kernels neither read nor write (gated
// attention's gate logits).
struct QkvShape {
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;  // even: RoPE pairs element i with i + head_dim/2
  // cos and sin of the rotating pairs (nonzero frequency) times this: longrope's attention factor on partially
  // rotated heads, whose zero-frequency pairs pass unscaled (ops/rope.h). 1 elsewhere (the attention folds the
  // factor into its softmax scale when every pair rotates).
  float rotated_scale = 1.0f;
  // The norms scale by this plus their weight (Gemma's 1; 0 elsewhere).
  float norm_weight_offset = 0.0f;
  int64_t gate_heads = 0;
};

// All BF16 but inv_freq (F32 [head_dim/2]) and positions (I32 [tokens]). q_norm / k_norm may be null (no norm).
cudaError_t launch_qkv_norm_rope_forward(const void* qkv, const void* q_norm, const void* k_norm, float eps,
                                         const float* inv_freq, const int32_t* positions, void* q, void* k, void* v,
                                         QkvShape shape, cudaStream_t stream);

// Bytes of fp32 scratch the backward needs for its per-block dq_norm / dk_norm partials.
size_t qkv_norm_rope_backward_workspace_bytes(QkvShape shape);

// Writes dqkv from dq, dk, dv (inverse rotation, then the norm backward against the forward input qkv) and adds
// the norm weights' gradients into dq_norm / dk_norm when those are non-null (each BF16 or F32, as its flag says).
// A non-null dq_norm needs a non-null q_norm, and likewise for k.
cudaError_t launch_qkv_norm_rope_backward(const void* dq, const void* dk, const void* dv, const void* qkv,
                                          const void* q_norm, const void* k_norm, float eps, const float* inv_freq,
                                          const int32_t* positions, void* dqkv, void* dq_norm, void* dk_norm,
                                          bool dq_norm_is_bf16, bool dk_norm_is_bf16, QkvShape shape, void* workspace,
                                          cudaStream_t stream);

}  // namespace moetune::ops::cuda
