// MoeBlock::forward_one_token: one token of a generation through the MoE sublayer without dispatch, for the layers
// it implements (runs_one_token).
#include "moetune/core/phase_profile.h"
#include "moetune/model/cuda/moe_block.h"
#include "moetune/model/cuda/swiglu_mlp.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/expert_gemv.h"
#include "moetune/ops/cuda/gate.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }
}  // namespace

bool MoeBlock::runs_one_token() const {
  // Padded relu² experts too (padded_experts.h): the matrix-vector kernels read the unpadded weights, any width.
  const Activation activation = spec_.experts.activation;
  // The matrix-vector kernels' gate is SiLU: another hidden_act decodes through the forward's path.
  const bool plain_experts = (spec_.experts.silu_gated() || activation == Activation::ReluSquared) &&
                             !p_.gate_up_bias.defined() && !p_.down_bias.defined() && expert_lora_.empty();
  // The shared expert's MlpSpec (its activation, biases) goes to swiglu_mlp below; its adapters do not.
  const bool plain_shared = shared_lora_.gate_up.empty() && shared_lora_.down.empty() && shared_gate_lora_.empty();
  // FlexOlmo's norms (none on the input, one on the output) decode through the forward's path.
  const bool pre_normed = p_.norm.defined() && !out_norm_.defined();
  return plain_experts && plain_shared && pre_normed && !dispatcher_->transfers();
}

Tensor MoeBlock::forward_one_token(const Tensor& h) {
  const PhaseScope phase("moe");
  const int64_t k = spec_.router.top_k;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, eps_, normed, norm_offset_);
  Tensor expert_ids = device_like({1, k}, DType::I32), weights = device_like({1, k}, DType::F32);
  route_tokens(router_logits(normed), expert_ids, weights);  // the forward's router, whichever it is
  // Nemotron-H's latent MoE: the experts run in the latent width, between latent_in and latent_out.
  const bool latent = p_.latent_in.defined();
  Tensor experts_input = normed;
  if (latent) {
    experts_input = device_like({1, p_.latent_in.value.size(0)});
    ops::cuda::linear_forward(normed, p_.latent_in.value, p_.latent_in_bias.value, experts_input);
  }
  const bool gated = spec_.experts.activation == Activation::SwiGLU;
  Tensor activated = device_like({k, gated ? p_.gate_up.value.size(1) / 2 : p_.gate_up.value.size(1)});
  ops::cuda::expert_up_activation(
      experts_input, p_.gate_up.value, expert_ids, activated,
      gated ? ops::cuda::ExpertActivation::SwiGLU : ops::cuda::ExpertActivation::ReluSquared);
  Tensor out = device_like(h.shape());
  if (latent) {
    // As the forward: the routed sum in the latent width (no residual), projected back, then h added.
    const Tensor zero = Tensor::zeros(experts_input.shape(), DType::BF16, Device::cuda());
    Tensor combined = device_like(experts_input.shape());
    ops::cuda::expert_down_combine(activated, p_.down.value, expert_ids, weights, zero, combined);
    ops::cuda::linear_forward(combined, p_.latent_out.value, p_.latent_out_bias.value, out);
    ops::cuda::add(out, h, out);
  } else {
    ops::cuda::expert_down_combine(activated, p_.down.value, expert_ids, weights, h, out);
  }
  if (!p_.shared.defined()) return out;
  Tensor shared = device_like(h.shape());
  swiglu_mlp(normed, p_.shared, shared, nullptr, spec_.shared_expert->mlp);
  if (!p_.shared_gate.defined()) {
    ops::cuda::add(out, shared, out);
    return out;
  }
  Tensor gate_logits = device_like({1, 1}, DType::F32);
  ops::cuda::matmul(normed, false, p_.shared_gate.value, true, gate_logits);
  ops::cuda::sigmoid_gated_add(out, shared, gate_logits, out);
  return out;
}

}  // namespace moetune::model::cuda
