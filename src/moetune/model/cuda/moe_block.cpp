#include "moetune/model/cuda/moe_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/expert_norm_partials.h"
#include "moetune/model/cuda/mlp_activation.h"
#include "moetune/model/cuda/norm_for_backward.h"
#include "moetune/model/cuda/padded_experts.h"
#include "moetune/model/cuda/swiglu_mlp.h"
#include "moetune/model/lora_refusal.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/moe_variant.h"
#include "moetune/model/recompute.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/expert_bias.h"
#include "moetune/ops/cuda/gate.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/router.h"
#include "moetune/ops/cuda/router_topk_softmax.h"
#include "moetune/ops/cuda/sigmoid_router.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }
// An overwritten gradient's squares are summed by its GEMM when the engine asks (StepContext::expert_norms).
Tensor norm_partials_for(const Tensor& grad, bool overwrite, ExpertNormPartials* norms) {
  return overwrite && norms != nullptr ? norms->claim(grad) : Tensor();
}
}  // namespace

MoeBlock::MoeBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps,
                   std::unique_ptr<TokenDispatcher> dispatcher)
    : spec_(*sublayer.moe()),
      eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      p_(MoeParams::lookup(store, layer, sublayer.norm, spec_.shared_expert.has_value())),
      dispatcher_(std::move(dispatcher)),
      correction_bias_(store.find(layer + "moe.router_correction_bias")),
      expert_lora_(ExpertLora::lookup(store, layer)),
      shared_lora_(SwigluLora::lookup(store, layer + "moe.shared_")),
      shared_gate_lora_(LoraLinear::lookup(store, layer + "moe.shared_gate")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale) {
  MOETUNE_CHECK(spec_.router.is_softmax_then_grouped_topk() || spec_.router.is_topk_then_softmax() ||
                    is_sigmoid_group_limited(spec_.router),
                "{}: this router is not implemented on the GPU", layer);
  MOETUNE_CHECK(spec_.latent_size.has_value() == p_.latent_in.defined() && p_.latent_in.defined() == p_.latent_out.defined(),
                "{}: the spec and the parameters disagree on the latent projections", layer);
  refuse_lora_on(store, layer, {"moe.latent_in", "moe.latent_out"}, "the latent MoE projections",
                 "fc1_latent_proj / fc2_latent_proj");
  // The experts' LoRA path recomputes SwiGLU (as the CPU's, it is not written for relu² experts).
  MOETUNE_CHECK(expert_lora_.empty() || spec_.experts.activation != Activation::ReluSquared,
                "{}: LoRA on relu² experts is not implemented", layer);
  padded_width_ = gpu_experts_pre_activation_width(spec_.experts);
  if (padded_width_ == spec_.experts.first_projection()) padded_width_ = 0;
  MOETUNE_CHECK(padded_width_ == 0 || !p_.gate_up_bias.defined(), "{}: padded relu² experts with biases are not "
                "implemented on the GPU (moe_intermediate_size {} is not a multiple of 8)", layer, spec_.experts.intermediate);
}

std::vector<Tensor> MoeBlock::overwritten_gradients() const {
  std::vector<Tensor> grads;
  if (!padded_width_)  // a padded product's gradient is cut back from it and added
    for (const Param* p : {&p_.gate_up, &p_.down})
      if (p->grad.defined()) grads.push_back(p->grad);
  // The dense weights' gradients (their linear_backward's write_dweight); the biases' add.
  for (const Param* p : {&p_.router, &p_.shared_gate, &p_.latent_in, &p_.latent_out})
    if (p->grad.defined()) grads.push_back(p->grad);
  if (p_.shared.defined()) add_swiglu_weight_grads(p_.shared, grads);
  return grads;
}

std::pair<Tensor, Tensor> MoeBlock::expert_weights() const {
  if (!padded_width_) return {p_.gate_up.value, p_.down.value};
  return {up_padded_, down_padded_};
}

void MoeBlock::add_gate_up_weight_grad(const Tensor& dgate_up, bool overwrite, ExpertNormPartials* norms) const {
  if (!p_.gate_up.grad.defined()) return;
  if (!padded_width_) {
    ops::cuda::grouped_matmul_weight_grad(dgate_up, dispatched_.rows, dispatched_.offsets, p_.gate_up.grad,
                                          /*accumulate=*/!overwrite, norm_partials_for(p_.gate_up.grad, overwrite, norms));
    return;
  }
  Tensor padded = Tensor::empty(up_padded_.shape(), p_.gate_up.grad.dtype(), Device::cuda());
  ops::cuda::grouped_matmul_weight_grad(dgate_up, dispatched_.rows, dispatched_.offsets, padded, /*accumulate=*/false);
  add_cut_expert_rows(padded, p_.gate_up.grad);
}

void MoeBlock::add_down_weight_grad(const Tensor& dexpert_out, const Tensor& activated, bool overwrite,
                                    ExpertNormPartials* norms) const {
  if (!padded_width_) {
    ops::cuda::grouped_matmul_weight_grad(dexpert_out, activated, dispatched_.offsets, p_.down.grad,
                                          /*accumulate=*/!overwrite, norm_partials_for(p_.down.grad, overwrite, norms));
    return;
  }
  Tensor padded = Tensor::empty(down_padded_.shape(), p_.down.grad.dtype(), Device::cuda());
  ops::cuda::grouped_matmul_weight_grad(dexpert_out, activated, dispatched_.offsets, padded, /*accumulate=*/false);
  add_cut_expert_columns(padded, p_.down.grad);
}

void MoeBlock::add_expert_bias(const Param& bias, const Tensor& rows) const {
  if (!bias.defined()) return;
  MOETUNE_CHECK(dispatched_.offsets.size(0) == bias.value.size(0) + 1,
                "expert biases with expert parallelism are not implemented on the GPU (the layer holds {} of {} "
                "experts); train this model with ep 1",
                dispatched_.offsets.size(0) - 1, bias.value.size(0));
  ops::cuda::expert_bias_add(rows, bias.value, dispatched_.offsets);
}

Tensor MoeBlock::router_logits(const Tensor& normed) const {
  Tensor logits = device_like({normed.size(0), spec_.router.num_experts}, DType::F32);
  if (p_.router_bias.defined())
    ops::cuda::linear_forward(normed, p_.router.value, p_.router_bias.value, logits);
  else
    ops::cuda::matmul(normed, false, p_.router.value, true, logits);
  return logits;
}

Tensor MoeBlock::correction_bias_f32() const {
  Tensor bias = correction_bias_.value;  // fp32, as the checkpoint loader keeps buffers
  if (bias.defined() && bias.dtype() != DType::F32) {
    bias = device_like({spec_.router.num_experts}, DType::F32);
    ops::cast_into(correction_bias_.value, bias);
  }
  return bias;
}

void MoeBlock::route_tokens(const Tensor& logits, const Tensor& expert_ids, const Tensor& weights) const {
  const int64_t k = spec_.router.top_k;
  if (is_sigmoid_group_limited(spec_.router)) {
    ops::cuda::sigmoid_router_forward(logits, correction_bias_f32(), group_limited(spec_.router), expert_ids, weights);
  } else if (spec_.router.topk_before_softmax) {
    ops::cuda::router_topk_softmax_forward(logits, k, expert_ids, weights);
  } else {
    ops::SoftmaxTopkOptions options = softmax_topk_options(spec_.router);
    if (spec_.router.correction_bias) options.choice_bias = correction_bias_f32();  // ERNIE 4.5's choice
    ops::cuda::router_topk_forward(logits, k, spec_.router.renormalize, expert_ids, weights, options);
  }
}

Tensor MoeBlock::forward(const Tensor& h, const StepContext& context) {
  if (context.kv_cache && h.size(0) == 1 && runs_one_token()) return forward_one_token(h);
  const Tensor& token_valid = context.batch.token_valid;
  const AuxLossSums& aux = context.aux;
  const int64_t tokens = h.size(0), experts = spec_.router.num_experts, k = spec_.router.top_k;
  if (padded_width_) {
    up_padded_ = pad_expert_rows(p_.gate_up.value, padded_width_);
    down_padded_ = pad_expert_columns(p_.down.value, padded_width_);
  }
  const auto [up, down] = expert_weights();
  const int64_t first = up.size(1), inner = activated_width(spec_.experts, first);
  const int64_t width = down.size(1);  // the experts' rows: the latent width, else hidden
  PhaseScope phase("moe.router");
  input_ = h;
  shared_lora_.pass = context.lora_pass();
  normed_ = cuda::input_norm_forward(h, p_.norm, eps_, norm_offset_);
  const Tensor& normed = normed_;
  logits_ = router_logits(normed);
  expert_ids_ = device_like({tokens, k}, DType::I32);
  weights_ = device_like({tokens, k}, DType::F32);
  route_tokens(logits_, expert_ids_, weights_);
  layer_counts_ = Tensor::zeros({experts}, DType::F32, Device::cuda());
  layer_prob_sums_ = Tensor::zeros({experts}, DType::F32, Device::cuda());
  ops::cuda::aux_loss_accumulate(logits_, expert_ids_, token_valid, layer_counts_, layer_prob_sums_);
  if (aux.counts.defined()) {
    ops::cuda::add(aux.counts, layer_counts_, aux.counts);
    ops::cuda::add(aux.prob_sums, layer_prob_sums_, aux.prob_sums);
  }
  phase.next("moe.dispatch");
  Tensor experts_input = normed;
  if (p_.latent_in.defined()) {
    experts_input = device_like({tokens, width});
    ops::cuda::linear_forward(normed, p_.latent_in.value, p_.latent_in_bias.value, experts_input);
  }
  dispatched_ = dispatcher_->dispatch(experts_input, expert_ids_);
  experts_input = Tensor();
  phase.next("moe.experts");
  // The residual joins here unless an output norm comes first (it adds h after the norm).
  const Tensor residual = out_norm_.defined() ? Tensor() : h;
  // An ungated shared expert's output takes the residual in its down GEMM (h + shared), and the combine then
  // adds the routed sum to that: no pass of its own for either add.
  const bool shared_takes_residual = p_.shared.defined() && !p_.shared_gate.defined() && !p_.latent_out.defined();
  if (p_.shared.defined()) {
    shared_out_ = device_like(h.shape());
    shared_gate_up_ =
        swiglu_mlp(normed, p_.shared, shared_out_, &shared_lora_, spec_.shared_expert->mlp,
                   shared_takes_residual ? residual : Tensor(),
                   keeps_activation(spec_.shared_expert->mlp, context.keep_outputs) ? &shared_activation_ : nullptr);
    if (p_.shared_gate.defined()) {
      shared_gate_logits_ = device_like({tokens, 1}, DType::F32);
      ops::cuda::matmul(normed, false, p_.shared_gate.value, true, shared_gate_logits_);
      shared_gate_lora_.forward(normed, shared_gate_logits_, context.lora_pass());
    }
  }
  if (!context.keep_outputs || !p_.norm.defined()) normed_ = Tensor();
  const int64_t rows = dispatched_.rows.size(0);
  gate_up_out_ = device_like({rows, first});
  ops::cuda::grouped_matmul(dispatched_.rows, up, /*transpose_w=*/true, dispatched_.offsets, gate_up_out_);
  add_expert_bias(p_.gate_up_bias, gate_up_out_);
  expert_lora_.gate_up_forward(dispatched_.rows, dispatched_.offsets, gate_up_out_);
  Tensor activated = device_like({rows, inner});
  activation_forward(spec_.experts, gate_up_out_, activated);
  expert_out_ = device_like({rows, width});
  ops::cuda::grouped_matmul(activated, down, /*transpose_w=*/true, dispatched_.offsets, expert_out_);
  add_expert_bias(p_.down_bias, expert_out_);
  expert_lora_.down_forward(activated, dispatched_.offsets, expert_out_);
  if (keeps_activation(spec_.experts, context.keep_outputs)) activation_ = activated;
  activated = Tensor();
  phase.next("moe.combine");
  Tensor out = device_like(h.shape());
  const Tensor mixed = out_norm_.defined() ? device_like(h.shape()) : out;  // the sublayer's output before the norm
  if (p_.latent_out.defined()) {
    latent_combined_ = device_like({tokens, width});
    dispatcher_->combine(expert_out_, weights_, latent_combined_, {});
    ops::cuda::linear_forward(latent_combined_, p_.latent_out.value, p_.latent_out_bias.value, mixed);
    if (residual.defined()) ops::cuda::add(mixed, residual, mixed);
  } else {
    dispatcher_->combine(expert_out_, weights_, mixed, shared_takes_residual ? shared_out_ : residual);
  }
  if (shared_gate_logits_.defined())
    ops::cuda::sigmoid_gated_add(mixed, shared_out_, shared_gate_logits_, mixed);
  else if (shared_out_.defined() && !shared_takes_residual)
    ops::cuda::add(mixed, shared_out_, mixed);
  if (!shared_gate_logits_.defined()) shared_out_ = Tensor();  // only the gate's backward reads it
  if (out_norm_.defined()) out_norm_.forward(mixed, h, out, /*keep=*/!context.kv_cache);
  return out;
}

Tensor MoeBlock::backward(const Tensor& dout, const StepContext& context) {
  const Tensor& token_valid = context.batch.token_valid;
  const double aux_scale = context.aux_scale;
  const int64_t tokens = dout.size(0), experts = spec_.router.num_experts, k = spec_.router.top_k;
  const auto [up, down] = expert_weights();
  const int64_t first = up.size(1), inner = activated_width(spec_.experts, first);
  const int64_t hidden = dout.size(1), width = down.size(1), rows = dispatched_.rows.size(0);
  PhaseScope phase("moe.combine.bwd");
  const Tensor dmixed = out_norm_.backward(dout);  // d(the sublayer's output before any output norm)
  Tensor dcombined = dmixed;                       // d(the experts' weighted sum)
  if (p_.latent_out.defined()) {
    dcombined = device_like({tokens, width});
    ops::cuda::linear_backward(dmixed, latent_combined_, p_.latent_out.value, dcombined, p_.latent_out.grad,
                               p_.latent_out_bias.grad, false, context.overwrite_gradients);
    latent_combined_ = Tensor();
  }
  Tensor dexpert_out = device_like({rows, width});
  Tensor dweights = device_like({tokens, k}, DType::F32);
  dispatcher_->combine_backward(dcombined, expert_out_, weights_, dexpert_out, dweights);
  dcombined = Tensor();
  if (p_.down_bias.grad.defined()) ops::cuda::expert_bias_grad(dexpert_out, dispatched_.offsets, p_.down_bias.grad);
  phase.next("moe.experts.bwd");
  // A dispatcher that transfers d(rows) back to the tokens' ranks does so while the weight gradients run (they
  // need nothing downstream); otherwise each weight gradient goes as early as its inputs allow, freeing them.
  const bool overlap = dispatcher_->transfers();
  // The forward's activation kept (StepContext::keep_outputs): down's weight gradient reads it, first, and the
  // activation's backward writes d(gate_up) alone (1/6 less traffic than the fused pass below). Otherwise, gated
  // experts without LoRA on down (which adds to d(activated) and reads the activation) nor a transfer: down's
  // input gradient first, then the activation's backward writes the recomputed activation over d(activated) for
  // down's weight gradient: one pass over the pre-activation instead of two (0.35 -> 0.26 ms on Moonlight's
  // layer, docs/benchmarks.md), with d(expert_out) held until then beside d(gate_up) (the memory plan counts it).
  // Otherwise down's weight gradient goes first on the activation recomputed apart. (SwiGLU's backward inside down's
  // input-gradient GEMM epilogue was built and measured 2-16% slower than these passes at Moonlight's, Qwen3's and
  // DeepSeek-V3's widths, H200 session 33: removed.)
  const bool kept = activation_.defined();
  const bool fused = !kept && !overlap && !expert_lora_.on_down() && p_.down.grad.defined() &&
                     spec_.experts.activation != Activation::ReluSquared;
  // Frozen experts (LoRA, training.freeze) have no weight gradients.
  const auto down_weight_gradient = [&] {
    if (!p_.down.grad.defined()) return;
    if (kept) {
      add_down_weight_grad(dexpert_out, activation_, context.overwrite_gradients, context.expert_norms);
      activation_ = Tensor();
      return;
    }
    Tensor activated = device_like({rows, inner});  // recomputed from the kept pre-activation
    activation_forward(spec_.experts, gate_up_out_, activated);
    add_down_weight_grad(dexpert_out, activated, context.overwrite_gradients, context.expert_norms);
  };
  if (!overlap && !fused) down_weight_gradient();
  Tensor dactivated = device_like({rows, inner});
  ops::cuda::grouped_matmul(dexpert_out, down, /*transpose_w=*/false, dispatched_.offsets, dactivated);
  if (expert_lora_.on_down()) {
    Tensor activated = device_like({rows, inner});  // recomputed, as for the weight gradient
    activation_forward(spec_.experts, gate_up_out_, activated);
    expert_lora_.down_backward(dexpert_out, activated, dispatched_.offsets, dactivated);
  }
  if (!overlap && !fused) dexpert_out = Tensor();
  Tensor dgate_up = device_like({rows, first});
  activation_backward(spec_.experts, dactivated, gate_up_out_, dgate_up, /*recomputed=*/fused ? dactivated : Tensor());
  if (p_.gate_up_bias.grad.defined()) ops::cuda::expert_bias_grad(dgate_up, dispatched_.offsets, p_.gate_up_bias.grad);
  if (fused) {
    add_down_weight_grad(dexpert_out, /*activated=*/dactivated, context.overwrite_gradients, context.expert_norms);
    dexpert_out = Tensor();
  }
  dactivated = Tensor();
  if (!overlap) {
    gate_up_out_ = Tensor();
    add_gate_up_weight_grad(dgate_up, context.overwrite_gradients, context.expert_norms);
  }
  Tensor drows = device_like({rows, width});
  ops::cuda::grouped_matmul(dgate_up, up, /*transpose_w=*/false, dispatched_.offsets, drows);
  expert_lora_.gate_up_backward(dgate_up, dispatched_.rows, dispatched_.offsets, drows);
  phase.next("moe.dispatch.bwd");
  dispatcher_->begin_dispatch_backward(drows);
  drows = Tensor();
  if (overlap) {
    phase.next("moe.experts.bwd");
    down_weight_gradient();
    add_gate_up_weight_grad(dgate_up, context.overwrite_gradients, context.expert_norms);
    dexpert_out = gate_up_out_ = Tensor();
    phase.next("moe.dispatch.bwd");
  }
  dgate_up = dispatched_.rows = Tensor();
  const Tensor normed = cuda::input_norm_for_backward(normed_, input_, p_.norm, eps_, norm_offset_);
  Tensor dnormed = device_like({tokens, hidden});
  if (p_.latent_in.defined()) {
    Tensor dlatent = device_like({tokens, width});
    dispatcher_->end_dispatch_backward(dlatent);
    ops::cuda::linear_backward(dlatent, normed, p_.latent_in.value, dnormed, p_.latent_in.grad, p_.latent_in_bias.grad,
                               false, context.overwrite_gradients);
  } else {
    dispatcher_->end_dispatch_backward(dnormed);
  }
  phase.next("moe.router.bwd");
  // The router: through the top-k weights, plus the aux loss; its GEMMs take the logits' gradient in bf16 (the
  // precision HF's router runs in).
  Tensor dlogits = device_like({tokens, experts}, DType::F32);
  if (is_sigmoid_group_limited(spec_.router))
    ops::cuda::sigmoid_router_backward(logits_, expert_ids_, dweights, group_limited(spec_.router), dlogits);
  else if (spec_.router.topk_before_softmax)
    ops::cuda::router_topk_softmax_backward(expert_ids_, weights_, dweights, dlogits);
  else
    ops::cuda::router_topk_backward(logits_, expert_ids_, weights_, dweights, spec_.router.renormalize, dlogits,
                                    float(spec_.router.scaling_factor));
  if (aux_scale != 0)
    ops::cuda::aux_loss_backward(logits_, token_valid, context.aux.counts, context.aux_rows, aux_scale, dlogits);
  Tensor dlogits_bf16 = device_like({tokens, experts});
  ops::cast_into(dlogits, dlogits_bf16);
  ops::cuda::linear_backward(dlogits_bf16, normed, p_.router.value, dnormed, p_.router.grad, p_.router_bias.grad,
                             /*accumulate_dx=*/true, context.overwrite_gradients);
  if (p_.shared.defined()) {
    Tensor dshared = dmixed;
    if (shared_gate_logits_.defined()) {
      dshared = device_like(dout.shape());
      Tensor dgate = device_like({tokens, 1}, DType::F32);
      ops::cuda::sigmoid_gated_add_backward(dmixed, shared_out_, shared_gate_logits_, dshared, dgate);
      Tensor dgate_bf16 = device_like({tokens, 1});
      ops::cast_into(dgate, dgate_bf16);
      ops::cuda::linear_backward(dgate_bf16, normed, p_.shared_gate.value, dnormed, p_.shared_gate.grad, {},
                                 /*accumulate_dx=*/true, context.overwrite_gradients);
      shared_gate_lora_.backward(dgate_bf16, normed, dnormed);
    }
    swiglu_mlp_backward(dshared, normed, shared_gate_up_, p_.shared, dnormed, /*accumulate_dx=*/true, &shared_lora_,
                        spec_.shared_expert->mlp, context.overwrite_gradients, shared_activation_);
  }
  Tensor dh = device_like(input_.shape());
  cuda::input_norm_backward(dnormed, input_, p_.norm, eps_, dh, dout, norm_offset_);
  clear_stash();
  return dh;
}

size_t MoeBlock::stash_bytes() const {
  return held_bytes({&input_, &normed_, &logits_, &expert_ids_, &weights_, &dispatched_.rows, &gate_up_out_,
                     &activation_, &expert_out_, &latent_combined_, &shared_gate_up_, &shared_activation_, &shared_out_,
                     &shared_gate_logits_}) +
         dispatcher_->stash_bytes() + expert_lora_.stash_bytes() + shared_lora_.stash_bytes() +
         shared_gate_lora_.stash_bytes() + out_norm_.stash_bytes();
}

void MoeBlock::clear_stash() {
  input_ = normed_ = logits_ = expert_ids_ = weights_ = gate_up_out_ = activation_ = expert_out_ = latent_combined_ =
      Tensor();
  up_padded_ = down_padded_ = Tensor();
  shared_gate_up_ = shared_activation_ = shared_out_ = shared_gate_logits_ = Tensor();
  dispatched_ = {};
  dispatcher_->clear();
  expert_lora_.clear_stash();
  shared_lora_.clear_stash();
  shared_gate_lora_.clear_stash();
  out_norm_.clear_stash();
}

}  // namespace moetune::model::cuda
