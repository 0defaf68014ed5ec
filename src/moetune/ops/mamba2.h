// Mamba2's selective state-space mixer (NemotronHMamba2Mixer in transformers 5.17) as three CPU reference ops:
// the causal depthwise conv over xBC with its SiLU, the selective scan as the plain token-by-token recurrence
// (the oracle for a chunked GPU scan), and the gated RMSNorm. model/mamba2_mixer.h composes them with the
// projections.
//
// Rows are tokens, N = B·S of them. `starts[n]` is 1 where a document begins (row 0 of each sequence, each packed
// document, each edge between padding and tokens): the conv window and the SSM state restart there, so a packed
// row computes what its documents would compute one by one.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/document_starts.h"

namespace moetune::ops {

// out = silu(bias + Σ_k weight[c, k] · xbc[n - (K-1) + k, c]) over rows of the same document (earlier rows of the
// window count as zeros, as the conv's left padding does). xbc [N, C], weight [C, K] (conv1d.weight without its
// middle dimension), bias [C] or undefined.
Tensor mamba2_conv_forward(const Tensor& xbc, const Tensor& weight, const Tensor& bias, const DocumentStarts& starts);

// Given d(out) [N, C]: accumulates dweight and dbias (each unless undefined) and returns d(xbc). The
// pre-activation is recomputed from xbc.
Tensor mamba2_conv_backward(const Tensor& dout, const Tensor& xbc, const Tensor& weight, const Tensor& bias,
                            const DocumentStarts& starts, const Tensor& dweight, const Tensor& dbias);

struct Mamba2Scan {
  int64_t num_heads = 0, head_dim = 0, num_groups = 1, state_size = 0;
  // dt = clamp(softplus(dt_raw + dt_bias), dt_min, dt_max). transformers' mixer clamps to
  // (time_step_min, inf), not to config.time_step_limit: the family passes what transformers uses.
  double dt_min = 0, dt_max = INFINITY;
};

// What the scan reads per token: x [N, H·P], dt_raw [N, H], b and c [N, G·S] (heads h share group h / (H/G)).
struct Mamba2ScanInputs {
  Tensor x, dt, b, c;
};

// What it reads per head, all [H]: dt_bias, A_log (A = -exp(A_log)) and the skip D. As gradients: each
// undefined one is frozen.
struct Mamba2ScanParams {
  Tensor dt_bias, a_log, d;
};

// y [N, H·P]: state_n = exp(dt_n·A) · state_{n-1} + dt_n · B_n ⊗ x_n (state_{-1} = 0 at a document start),
// y_n = state_n · C_n + D · x_n. With `state` (F32 [H, P, S], generation's cache): row 0 continues from it unless
// it starts a document, and it is overwritten with the state after the last row.
Tensor mamba2_scan_forward(const Mamba2ScanInputs& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                           const DocumentStarts& starts, const Tensor& state = {});

// Given dy [N, H·P]: the inputs' gradients (same shapes as `in`, dt's with respect to dt_raw), and the per-head
// parameters' gradients accumulated into `dparams`. The states are recomputed and all held at once (N·H·P·S
// floats): a reference for tests and small models, not for long sequences of a full-size model.
Mamba2ScanInputs mamba2_scan_backward(const Tensor& dy, const Mamba2ScanInputs& in, const Mamba2ScanParams& params,
                                      const Mamba2Scan& scan, const DocumentStarts& starts,
                                      const Mamba2ScanParams& dparams);

// Where the gated RMSNorm applies its gate silu(z). BeforeNorm: Zamba2RMSNormGated / Mamba2's (norm_before_gate =
// False), out = weight ⊙ rms_norm(x ⊙ silu(z)). AfterNorm: Qwen3NextRMSNormGated (transformers' "norm before gate"),
// out = weight ⊙ rms_norm(x) ⊙ silu(z).
enum class GatePlacement { BeforeNorm, AfterNorm };

// The gated RMSNorm with the statistics per group of `group_size` columns (Mamba2: the width / n_groups; Qwen3-Next:
// one value head). x, z [N, D], weight [D].
Tensor gated_rms_norm_forward(const Tensor& x, const Tensor& z, const Tensor& weight, int64_t group_size, double eps,
                              GatePlacement placement = GatePlacement::BeforeNorm);

struct GatedRmsNormGrads {
  Tensor dx, dz;
};

// Given dy [N, D]: dx and dz; accumulates dweight unless undefined.
GatedRmsNormGrads gated_rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& weight,
                                          int64_t group_size, double eps, const Tensor& dweight,
                                          GatePlacement placement = GatePlacement::BeforeNorm);

}  // namespace moetune::ops
