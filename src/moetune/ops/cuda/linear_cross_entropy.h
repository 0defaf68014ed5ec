// The LM head and the causal-LM cross-entropy fused, so that the [T, V] logits (151936 columns for Qwen3)
// are never held whole: rows go through in chunks, each chunk's logits become its d(logits) in place, and two
// GEMMs per chunk take that to d(hidden) and d(weight). Semantics of ops/loss.h (HF's ForCausalLMLoss), with
// bf16 logits and fp32 softmax statistics and loss, as HF computes in bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// hidden [T, H] BF16 (after the final norm), weight [V, H] BF16, targets [T] I32 on the GPU (shifted labels,
// -100 = not scored; see ops/loss.h). Adds Σ over scored rows of -log softmax(hidden·Wᵀ)[target] into
// loss_sum (F32 [1] on the GPU). A target outside [0, V) other than -100 makes loss_sum NaN (and that row's
// gradient zero): a bad label is reported by the loss the trainer reads, without a host synchronisation here.
// When dhidden is defined, writes dhidden = grad_scale · d(loss_sum)/d(hidden) ([T, H] BF16 or F32); when
// dweight is defined, accumulates dweight += grad_scale · d(loss_sum)/d(W) ([V, H] BF16 or F32; a BF16
// dweight is rounded once per chunk). chunk_rows = 0 picks chunks whose bf16 logits take at most 640 MiB, in
// whole 256-row blocks (ops/lm_head_chunk.h).
// write_dweight: dweight = (not +=) that gradient, what it held never read: the first chunk's GEMM runs with
// beta 0, the others add to it as before (T = 0 zeroes it). A step's first backward pass writes the LM head's
// gradient so, instead of having it zeroed first (model/cuda/step_context.h overwrite_gradients); beta 0 gives
// the bits beta 1 gives into zeros, and skips reading the 671 MB of Moonlight's head gradient once.
// logit_scale: the logits are logit_scale · hidden·Wᵀ (Granite's 1 / logits_scaling), the GEMM's alpha, and their
// gradients' GEMMs take it too.
// The result is deterministic (no atomics).
void linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets, double grad_scale,
                          const Tensor& loss_sum, const Tensor& dhidden = {}, const Tensor& dweight = {},
                          int64_t chunk_rows = 0, bool write_dweight = false, float logit_scale = 1.0f);

// Bytes of scratch the call allocates (for the memory plan), for T rows and V classes; the GEMM library's
// persistent workspace (gemm_workspace_bytes()) is not included.
size_t linear_cross_entropy_workspace_bytes(int64_t rows, int64_t vocab, int64_t chunk_rows = 0);

// The chunk height the call uses for these sizes (1 ≤ result ≤ rows, or 0 when rows is 0).
int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab, int64_t chunk_rows = 0);

}  // namespace moetune::ops::cuda
