#include "moetune/model/cuda/moe_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/router.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }
}  // namespace

MoeBlock::MoeBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config), p_(MoeParams::lookup(store, prefix)) {}

Tensor MoeBlock::forward(const Tensor& h, const Tensor& token_valid, const AuxLossSums& aux) {
  const int64_t tokens = h.size(0), experts = config_.num_experts, k = config_.num_experts_per_tok;
  const int64_t inner = p_.gate_up.value.size(1) / 2, hidden = h.size(1);
  input_ = h;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, config_.rms_norm_eps, normed);
  logits_ = device_like({tokens, experts}, DType::F32);
  ops::cuda::matmul(normed, false, p_.router.value, true, logits_);
  expert_ids_ = device_like({tokens, k}, DType::I32);
  weights_ = device_like({tokens, k}, DType::F32);
  ops::cuda::router_topk_forward(logits_, k, config_.norm_topk_prob, expert_ids_, weights_);
  layer_counts_ = Tensor::zeros({experts}, DType::F32, Device::cuda());
  layer_prob_sums_ = Tensor::zeros({experts}, DType::F32, Device::cuda());
  ops::cuda::aux_loss_accumulate(logits_, expert_ids_, token_valid, layer_counts_, layer_prob_sums_);
  if (aux.counts.defined()) {
    ops::cuda::add(aux.counts, layer_counts_, aux.counts);
    ops::cuda::add(aux.prob_sums, layer_prob_sums_, aux.prob_sums);
  }
  plan_ = ops::cuda::plan_permutation(expert_ids_, experts);
  permuted_ = device_like({tokens * k, hidden});
  ops::cuda::permute_tokens(normed, plan_, permuted_);
  normed = Tensor();
  gate_up_out_ = device_like({tokens * k, 2 * inner});
  ops::cuda::grouped_matmul(permuted_, p_.gate_up.value, /*transpose_w=*/true, plan_.offsets, gate_up_out_);
  Tensor activated = device_like({tokens * k, inner});
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  expert_out_ = device_like({tokens * k, hidden});
  ops::cuda::grouped_matmul(activated, p_.down.value, /*transpose_w=*/true, plan_.offsets, expert_out_);
  Tensor out = device_like(h.shape());
  ops::cuda::combine_experts(expert_out_, plan_, weights_, out, h);
  return out;
}

Tensor MoeBlock::backward(const Tensor& dout, const Tensor& token_valid, const AuxLossSums& aux, double aux_rows,
                          double aux_scale) {
  const int64_t tokens = dout.size(0), experts = config_.num_experts, k = config_.num_experts_per_tok;
  const int64_t inner = p_.gate_up.value.size(1) / 2, hidden = dout.size(1);
  Tensor dexpert_out = device_like({tokens * k, hidden});
  Tensor dweights = device_like({tokens, k}, DType::F32);
  ops::cuda::combine_experts_backward(dout, expert_out_, plan_, weights_, dexpert_out, dweights);
  expert_out_ = Tensor();
  // Down projection: the activation is recomputed from the kept pre-activation.
  Tensor activated = device_like({tokens * k, inner});
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  ops::cuda::grouped_matmul_weight_grad(dexpert_out, activated, plan_.offsets, p_.down.grad, /*accumulate=*/true);
  activated = Tensor();
  Tensor dactivated = device_like({tokens * k, inner});
  ops::cuda::grouped_matmul(dexpert_out, p_.down.value, /*transpose_w=*/false, plan_.offsets, dactivated);
  dexpert_out = Tensor();
  Tensor dgate_up = device_like({tokens * k, 2 * inner});
  ops::cuda::swiglu_backward(dactivated, gate_up_out_, dgate_up);
  dactivated = gate_up_out_ = Tensor();
  ops::cuda::grouped_matmul_weight_grad(dgate_up, permuted_, plan_.offsets, p_.gate_up.grad, /*accumulate=*/true);
  Tensor dpermuted = device_like({tokens * k, hidden});
  ops::cuda::grouped_matmul(dgate_up, p_.gate_up.value, /*transpose_w=*/false, plan_.offsets, dpermuted);
  dgate_up = permuted_ = Tensor();
  Tensor dnormed = device_like({tokens, hidden});
  ops::cuda::permute_tokens_backward(dpermuted, plan_, dnormed);
  dpermuted = Tensor();
  // The router: through the top-k weights, plus the aux loss; its GEMMs take the logits' gradient in bf16 (the
  // precision HF's router runs in).
  Tensor dlogits = device_like({tokens, experts}, DType::F32);
  ops::cuda::router_topk_backward(logits_, expert_ids_, weights_, dweights, config_.norm_topk_prob, dlogits);
  if (aux_scale != 0) ops::cuda::aux_loss_backward(logits_, token_valid, aux.counts, aux_rows, aux_scale, dlogits);
  Tensor dlogits_bf16 = device_like({tokens, experts});
  ops::cast_into(dlogits, dlogits_bf16);
  Tensor normed = device_like(input_.shape());
  ops::cuda::rms_norm_forward(input_, p_.norm.value, config_.rms_norm_eps, normed);
  ops::cuda::linear_backward(dlogits_bf16, normed, p_.router.value, dnormed, p_.router.grad, {}, /*accumulate_dx=*/true);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, p_.norm.value, config_.rms_norm_eps, dh, p_.norm.grad, dout);
  clear_stash();
  return dh;
}

size_t MoeBlock::stash_bytes() const {
  return held_bytes({&input_, &logits_, &expert_ids_, &weights_, &plan_.offsets, &plan_.row_of, &plan_.source,
                     &permuted_, &gate_up_out_, &expert_out_});
}

void MoeBlock::clear_stash() {
  input_ = logits_ = expert_ids_ = weights_ = permuted_ = gate_up_out_ = expert_out_ = Tensor();
  plan_ = {};
}

}  // namespace moetune::model::cuda
