// Launchers of the absorbed-MLA decode kernels (ops/cuda/mla_absorbed.h): raw pointers in, a CUDA status out, free
// of the engine's host headers so that the .cu file compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// DeepSeek-V3's head widths as the absorbed kernels read them. kv_b's weight is BF16 [heads·(nope + v_dim), latent]:
// head h's k_nope rows first (W_uk), then its v rows (W_uv).
struct MlaAbsorbedShape {
  int64_t rows = 0;  // tokens × heads
  int heads = 0, nope = 0, rope = 0, v_dim = 0, latent = 0;
  int q_width = 0;    // q's head width (≥ nope + rope: [q_nope | rotated q_rope | zeros])
  int out_width = 0;  // the attended output's head width (≥ v_dim, zeros past it)
};

// q_abs [rows, latent + rope] = [q_nope · W_uk | rotated q_rope] per (token, head), from q [rows, q_width].
cudaError_t launch_mla_absorb_q(const void* q, const void* kv_b, void* q_abs, const MlaAbsorbedShape& shape,
                                cudaStream_t stream);

// attended [rows, out_width] = W_uv · o_latent per (token, head) in its first v_dim columns, zeros after; o_latent
// [rows, latent].
cudaError_t launch_mla_absorb_out(const void* o_latent, const void* kv_b, void* attended, const MlaAbsorbedShape& shape,
                                  cudaStream_t stream);

}  // namespace moetune::ops::cuda
