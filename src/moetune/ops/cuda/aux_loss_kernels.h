// Launchers of the load-balancing (aux) loss kernels: raw device pointers in, a CUDA status out. Free of the
// engine's host headers so that aux_loss.cu compiles without fmt; ops/cuda/aux_loss.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// counts[e] += how often e is among a valid token's top-k; prob_sums[e] += Σ over valid tokens of softmax(logits)[e].
// token_valid (u8 [tokens]) may be null: every token counts. experts ≤ 512 (the router's limit).
cudaError_t launch_aux_loss_accumulate(const float* logits, const int32_t* expert_ids, const uint8_t* token_valid,
                                       int64_t tokens, int experts, int top_k, float* counts, float* prob_sums,
                                       cudaStream_t stream);

// loss[0] = E · Σ_e counts[e] · prob_sums[e] / rows² (0 when rows is 0).
cudaError_t launch_aux_loss_value(const float* counts, const float* prob_sums, int experts, double rows, float* loss,
                                  cudaStream_t stream);

// dlogits[t] += p_t ⊙ (g − ⟨p_t, g⟩) for each valid token, g_e = scale · E · counts[e] / rows² (0 rows: nothing).
cudaError_t launch_aux_loss_backward(const float* logits, const uint8_t* token_valid, const float* counts,
                                     int64_t tokens, int experts, double rows, double scale, float* dlogits,
                                     cudaStream_t stream);

}  // namespace moetune::ops::cuda
