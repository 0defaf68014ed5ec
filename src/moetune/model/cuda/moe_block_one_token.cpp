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
  const bool plain_experts = spec_.experts.activation == Activation::SwiGLU && !p_.gate_up_bias.defined() &&
                             !p_.down_bias.defined() && expert_lora_.empty() && !p_.latent_in.defined() &&
                             !padded_width_;
  // The shared expert's MlpSpec (its activation, biases) goes to swiglu_mlp below; its adapters do not.
  const bool plain_shared = shared_lora_.gate_up.empty() && shared_lora_.down.empty() && shared_gate_lora_.empty();
  return plain_experts && plain_shared && !dispatcher_->transfers();
}

Tensor MoeBlock::forward_one_token(const Tensor& h) {
  const PhaseScope phase("moe");
  const int64_t k = spec_.router.top_k, inner = p_.gate_up.value.size(1) / 2;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, eps_, normed);
  Tensor expert_ids = device_like({1, k}, DType::I32), weights = device_like({1, k}, DType::F32);
  route_tokens(router_logits(normed), expert_ids, weights);  // the forward's router, whichever it is
  Tensor activated = device_like({k, inner});
  ops::cuda::expert_gate_up_swiglu(normed, p_.gate_up.value, expert_ids, activated);
  Tensor out = device_like(h.shape());
  ops::cuda::expert_down_combine(activated, p_.down.value, expert_ids, weights, h, out);
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
