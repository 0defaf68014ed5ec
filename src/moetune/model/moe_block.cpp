#include "moetune/model/moe_block.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_refusal.h"
#include "moetune/model/moe_variant.h"
#include "moetune/model/swiglu_mlp.h"
#include "moetune/ops/gate.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

MoeBlock::MoeBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps,
                   std::unique_ptr<TokenDispatcher> dispatcher)
    : spec_(*sublayer.moe()),
      eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      p_(MoeParams::lookup(store, layer, sublayer.norm, spec_.shared_expert.has_value())),
      dispatcher_(std::move(dispatcher)),
      expert_lora_(ExpertLora::lookup(store, layer)),
      shared_lora_(SwigluLora::lookup(store, layer + "moe.shared_")),
      shared_gate_lora_(LoraLinear::lookup(store, layer + "moe.shared_gate")),
      correction_bias_(store.find(layer + "moe.router_correction_bias")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale) {
  MOETUNE_CHECK(spec_.latent_size.has_value() == p_.latent_in.defined() && p_.latent_in.defined() == p_.latent_out.defined(),
                "{}: the spec and the parameters disagree on the latent projections", layer);
  refuse_lora_on(store, layer, {"moe.latent_in", "moe.latent_out"}, "the latent MoE projections",
                 "fc1_latent_proj / fc2_latent_proj");
  MOETUNE_CHECK(cpu_runs_router(spec_.router), "{}: this router is not implemented on the CPU", layer);
  MOETUNE_CHECK(spec_.router.bias == p_.router_bias.defined() && spec_.experts.bias == p_.gate_up_bias.defined(),
                "{}: the spec and the parameters disagree on the router's or the experts' biases", layer);
  // The experts' LoRA path takes biases and the clamped SwiGLU (GPT-OSS), not relu² (nor does the GPU's).
  MOETUNE_CHECK(expert_lora_.empty() || spec_.experts.activation != Activation::ReluSquared,
                "{}: LoRA on relu² experts is not implemented", layer);
}

Tensor MoeBlock::forward(const Tensor& h, const StepContext& context) {
  input_ = h;
  shared_lora_.training = context.training;
  shared_lora_.draw = context.lora_draw;
  const Tensor normed = input_norm_forward(h, p_.norm, eps_, norm_offset_);
  const Tensor logits = ops::linear_forward(normed, p_.router.value, p_.router_bias.value);
  routing_ = forced_choices_.empty() ? route(spec_.router, logits, correction_bias_.value)
                                     : route_chosen(spec_.router, logits, forced_choices_);
  // Nemotron-H's latent MoE: the experts' rows are the projection of the normed hidden state.
  const Tensor experts_input = p_.latent_in.defined() ? ops::linear_forward(normed, p_.latent_in.value, p_.latent_in_bias.value) : normed;
  dispatched_ = dispatcher_->dispatch(experts_input, routing_);
  activations_ = expert_lora_.empty() ? ops::expert_mlp(dispatched_.rows, dispatched_.offsets, p_.gate_up.value,
                                                        p_.down.value, expert_variant(spec_.experts, p_))
                                      : expert_lora_.forward(dispatched_.rows, dispatched_.offsets, p_.gate_up, p_.down,
                                                             expert_variant(spec_.experts, p_));
  Tensor routed = dispatcher_->combine(activations_.out, routing_);
  if (p_.latent_out.defined()) {
    latent_combined_ = routed;
    routed = ops::linear_forward(latent_combined_, p_.latent_out.value, p_.latent_out_bias.value);
  }
  // Without an output norm the residual joins first, the order these sums have always taken; with one (FlexOlmo),
  // the mixer's output is normed and then added.
  Tensor out = out_norm_.defined() ? routed : add(h, routed);
  if (p_.shared.defined()) {
    SwigluOutput shared = swiglu_mlp(normed, p_.shared, &shared_lora_, spec_.shared_expert->mlp);
    shared_gate_up_ = shared.gate_up;
    shared_out_ = shared.out;
    if (!p_.shared_gate.defined()) {
      out = add(out, shared_out_);
    } else {
      shared_gate_logits_ = ops::linear_forward(normed, p_.shared_gate.value);
      shared_gate_lora_.forward(normed, shared_gate_logits_, context.training, context.lora_draw);
      out = ops::sigmoid_gated_add(out, shared_out_, shared_gate_logits_);
    }
  }
  return out_norm_.defined() ? out_norm_.forward(out, h) : out;
}

Tensor MoeBlock::backward(const Tensor& dout, StepContext& context) {
  const Tensor drouter_logits = context.take_drouter_logits();
  const int64_t tokens = dout.size(0);
  const Tensor normed = input_norm_forward(input_, p_.norm, eps_, norm_offset_);  // recomputed, not kept
  const Tensor dmixed = out_norm_.backward(dout);                   // dout itself without an output norm
  const Tensor drouted = p_.latent_out.defined() ? ops::linear_backward(dmixed, latent_combined_, p_.latent_out.value,
                                                                        p_.latent_out.grad, p_.latent_out_bias.grad)
                                                 : dmixed;
  ops::CombineGrads combine = dispatcher_->combine_backward(drouted, activations_.out, routing_);
  Tensor ddispatched =
      expert_lora_.empty()
          ? ops::expert_mlp_backward(combine.dexpert_out, dispatched_.rows, activations_, dispatched_.offsets,
                                     p_.gate_up.value, p_.down.value, p_.gate_up.grad, p_.down.grad,
                                     expert_variant(spec_.experts, p_), expert_bias_grads(p_))
          : expert_lora_.backward(combine.dexpert_out, dispatched_.rows, activations_, dispatched_.offsets, p_.gate_up,
                                  p_.down, expert_variant(spec_.experts, p_), expert_bias_grads(p_));
  Tensor dnormed = dispatcher_->dispatch_backward(ddispatched, tokens);
  if (p_.latent_in.defined())
    dnormed = ops::linear_backward(dnormed, normed, p_.latent_in.value, p_.latent_in.grad, p_.latent_in_bias.grad);
  Tensor dlogits = route_backward(spec_.router, routing_, combine.dweight);
  if (drouter_logits.defined()) dlogits = add(dlogits, drouter_logits);
  dnormed = add(dnormed, ops::linear_backward(dlogits, normed, p_.router.value, p_.router.grad, p_.router_bias.grad));
  if (p_.shared.defined()) {
    Tensor dshared = dmixed;
    if (p_.shared_gate.defined()) {
      ops::SigmoidGateGrads gate = ops::sigmoid_gated_add_backward(dmixed, shared_out_, shared_gate_logits_);
      dshared = gate.dy;
      const Tensor dgate_input = ops::linear_backward(gate.dlogits, normed, p_.shared_gate.value, p_.shared_gate.grad);
      shared_gate_lora_.backward(gate.dlogits, normed, dgate_input);
      dnormed = add(dnormed, dgate_input);
    }
    dnormed = add(dnormed, swiglu_mlp_backward(dshared, normed, shared_gate_up_, p_.shared, &shared_lora_,
                                               spec_.shared_expert->mlp));
  }
  return input_norm_backward(dnormed, input_, p_.norm, eps_, dout, norm_offset_);
}

size_t MoeBlock::stash_bytes() const {
  return held_bytes({&input_, &routing_.logits, &dispatched_.rows, &activations_.gate_up, &activations_.out,
                     &shared_gate_up_, &shared_out_, &shared_gate_logits_, &latent_combined_}) +
         routing_.expert.size() * sizeof(int32_t) + routing_.weight.size() * sizeof(float) +
         dispatched_.offsets.size() * sizeof(int64_t) + dispatcher_->stash_bytes() + expert_lora_.stash_bytes() +
         shared_lora_.stash_bytes() + shared_gate_lora_.stash_bytes() + out_norm_.stash_bytes();
}

void MoeBlock::clear_stash() {
  dispatched_ = {};
  input_ = shared_gate_up_ = shared_out_ = shared_gate_logits_ = latent_combined_ = Tensor();
  routing_ = {};
  activations_ = {};
  dispatcher_->clear();
  expert_lora_.clear_stash();
  shared_lora_.clear_stash();
  shared_gate_lora_.clear_stash();
  out_norm_.clear_stash();
}

}  // namespace moetune::model
