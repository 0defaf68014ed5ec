// The experts' SwiGLU MLPs over tokens already in expert-major order: for each expert e, its rows X_e of the
// permuted buffer go through down_e(silu(gate_e X_e) ⊙ up_e X_e). The CPU loop over experts stands for the
// grouped GEMM of the GPU path; an expert with no rows is skipped. GPT-OSS's experts add biases and clamp their
// SwiGLU (ExpertVariant).
#pragma once

#include <optional>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/activation.h"

namespace moetune::ops {

struct ExpertActivations {
  Tensor gate_up;  // [T*k, 2I] pre-activation, the stash for the backward pass
  Tensor out;      // [T*k, H]
};

struct ExpertVariant {
  Tensor gate_up_bias, down_bias;    // [E, 2I], [E, H]; undefined: no bias
  std::optional<SwigluClamp> clamp;  // GPT-OSS's clamped SwiGLU instead of SwiGLU
  // Nemotron-H's relu² experts: gate_up_weight holds up alone [E, I, H] and the activation is relu(up x)².
  bool relu_squared = false;
  GateFunction gate = GateFunction::Silu;  // the unclamped gated experts' f in f(gate) ⊙ up (hidden_act)
};

// The biases' gradients (each undefined when absent or frozen).
struct ExpertBiasGrads {
  Tensor gate_up_bias, down_bias;
};

// Expert e's slice of an optional [E, ...] tensor (a bias or its gradient); undefined stays undefined.
Tensor expert_slice(const Tensor& t, int64_t e);

// The experts' activation of the pre-activation rows [R, 2I] (relu²: [R, I]) as `variant` says, and its backward.
Tensor expert_activation(const Tensor& pre, const ExpertVariant& variant);
Tensor expert_activation_backward(const Tensor& dinner, const Tensor& pre, const ExpertVariant& variant);

// permuted [T*k, H]; offsets [E+1]; gate_up_weight [E, 2I, H]; down_weight [E, H, I].
ExpertActivations expert_mlp(const Tensor& permuted, const std::vector<int64_t>& offsets, const Tensor& gate_up_weight,
                             const Tensor& down_weight, const ExpertVariant& variant = {});

// Accumulates the weight gradients into dgate_up_weight / ddown_weight (each undefined when frozen) and the
// biases' into `bias_grads`; returns d(permuted).
Tensor expert_mlp_backward(const Tensor& dout, const Tensor& permuted, const ExpertActivations& activations,
                           const std::vector<int64_t>& offsets, const Tensor& gate_up_weight, const Tensor& down_weight,
                           const Tensor& dgate_up_weight, const Tensor& ddown_weight, const ExpertVariant& variant = {},
                           const ExpertBiasGrads& bias_grads = {});

}  // namespace moetune::ops
