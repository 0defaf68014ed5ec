// Qwen3-Next's Gated DeltaNet token mixer (Qwen3NextGatedDeltaNet in transformers 5.17), its recurrence as a CPU
// reference op: the gated delta rule token by token, from the conv's q, k, v and in_proj's raw a, b columns to the
// core output before the gated RMSNorm (ops/mamba2.h's gated_rms_norm_* with GatePlacement::AfterNorm). The oracle
// for a chunked GPU kernel; transformers' chunked and recurrent forms compute the same function.
//
// Rows are tokens, N = B·S of them; the state restarts where `starts` flags a document (ops/document_starts.h).
#pragma once

#include <cstdint>

#include "moetune/core/tensor.h"
#include "moetune/ops/document_starts.h"

namespace moetune::ops {

// Value head h reads key head h / (Hv / Hk) (transformers' repeat_interleave); Hv must be a multiple of Hk.
struct GatedDeltaShape {
  int64_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0;
};

// Per token (rows N = B·S): q, k [N, Hk·Dk] (the conv's output, before any norm), v [N, Hv·Dv], a and b [N, Hv]
// (in_proj's raw columns). All F32, contiguous.
struct GatedDeltaInputs {
  Tensor q, k, v, a, b;
};

// Per value head, [Hv]: dt_bias and A_log. As gradients: an undefined one is frozen (not accumulated).
struct GatedDeltaParams {
  Tensor dt_bias, a_log;
};

// out [N, Hv·Dv]. Per token n and value head h, with kh its key head:
//   qn = l2norm(q[n, kh]) · Dk^-0.5, kn = l2norm(k[n, kh]), l2norm(x) = x · rsqrt(Σ x² + 1e-6);
//   beta = sigmoid(b[n, h]), g = −exp(A_log[h]) · softplus(a[n, h] + dt_bias[h]);
//   S ← exp(g) · S (S [Dk, Dv], zero before a document's first row); delta = beta · (v[n, h] − Sᵀ kn);
//   S ← S + kn ⊗ delta; out[n, h] = Sᵀ qn.
// With `state` (F32 [Hv, Dk, Dv], generation's cache): row 0 continues from it unless it starts a document, and it
// is overwritten with the state after the last row. Without it, row 0 starts from zeros whatever starts[0] says.
Tensor gated_delta_rule_forward(const GatedDeltaInputs& in, const GatedDeltaParams& params,
                                const GatedDeltaShape& shape, const DocumentStarts& starts, const Tensor& state = {});

// Given dout [N, Hv·Dv]: the inputs' gradients (same shapes as `in`; q's and k's through the l2norm and summed over
// the value heads sharing a key head), and dt_bias's and A_log's accumulated into `dparams` where defined. Row 0
// starts from zeros (no `state`: training runs whole documents). The forward pass holds one row's states at a
// time; the backward pass the state at every 64th row and one 64-row segment's states, recomputed from them.
GatedDeltaInputs gated_delta_rule_backward(const Tensor& dout, const GatedDeltaInputs& in,
                                           const GatedDeltaParams& params, const GatedDeltaShape& shape,
                                           const DocumentStarts& starts, const GatedDeltaParams& dparams);

}  // namespace moetune::ops
