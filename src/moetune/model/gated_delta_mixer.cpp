#include "moetune/model/gated_delta_mixer.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/linear.h"

namespace moetune::model {
namespace {

// The rule's inputs: q, k and v from the conv's output, a and b from in_proj's.
ops::GatedDeltaInputs rule_inputs(const GatedDeltaSpec& spec, const Tensor& projected, const Tensor& conv) {
  const GatedDeltaColumns at(spec);
  return {columns(conv, at.q, spec.key_dim()), columns(conv, at.k, spec.key_dim()),
          columns(conv, at.v, spec.value_dim()), columns(projected, at.a, spec.num_v_heads),
          columns(projected, at.b, spec.num_v_heads)};
}

Tensor gate(const GatedDeltaSpec& spec, const Tensor& projected) {
  return columns(projected, GatedDeltaColumns(spec).z, spec.value_dim());
}

ops::GatedDeltaParams rule_params(const GatedDeltaWeights& w) { return {w.dt_bias, w.a_log}; }

// [N, Hv·Dv] as [N·Hv, Dv]: the gated norm's rows are value heads, its weight [Dv] shared by all of them.
Tensor per_head(const GatedDeltaSpec& spec, const Tensor& x) { return x.view({-1, spec.v_head_dim}); }

// The rule's output normed per value head and gated by silu(z).
Tensor gated_norm(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& core, const Tensor& z) {
  return ops::gated_rms_norm_forward(per_head(spec, core), per_head(spec, z), w.norm, spec.v_head_dim, spec.norm_eps,
                                     ops::GatePlacement::AfterNorm)
      .view(core.shape());
}

// x Wᵀ, with the projection's adapters added where it has any.
Tensor project(const Tensor& x, const Tensor& weight, LoraLinear* lora, const GatedDeltaAdapters& adapters) {
  Tensor y = ops::linear_forward(x, weight, {});
  if (lora) lora->forward(x, y, adapters.training, adapters.draw);
  return y;
}

// d(x) of project's y, the weight's gradient (where not frozen) and the adapters' accumulated.
Tensor project_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dweight,
                        LoraLinear* lora) {
  Tensor dx = ops::linear_backward(dy, x, weight, dweight, {});
  if (lora) lora->backward(dy, x, dx);
  return dx;
}

Tensor norm_and_project(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& core, const Tensor& z,
                        const GatedDeltaAdapters& lora) {
  return project(gated_norm(spec, w, core, z), w.out_proj, lora.out_proj, lora);
}

}  // namespace

Tensor gated_delta_mixer_forward(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                                 const Mamba2Rows& rows, GatedDeltaStash* stash, const GatedDeltaAdapters& lora) {
  const Tensor input = masked(x, rows.valid);
  const Tensor projected = project(input, weights.in_proj, lora.in_proj, lora);
  const Tensor conv =
      ops::mamba2_conv_forward(columns(projected, 0, spec.conv_channels()), weights.conv, {}, rows.starts);
  const Tensor core = ops::gated_delta_rule_forward(rule_inputs(spec, projected, conv), rule_params(weights),
                                                    spec.shape(), rows.starts);
  if (stash) *stash = {input, projected, conv, core};
  return norm_and_project(spec, weights, core, gate(spec, projected), lora);
}

Tensor gated_delta_mixer_step(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                              const Tensor& conv_window, const Tensor& state, const GatedDeltaAdapters& lora) {
  const Tensor projected = project(x, weights.in_proj, lora.in_proj, lora);
  const Tensor conv = causal_conv_step(conv_window, columns(projected, 0, spec.conv_channels()), weights.conv, {});
  const Tensor core = ops::gated_delta_rule_forward(rule_inputs(spec, projected, conv), rule_params(weights),
                                                    spec.shape(), ops::DocumentStarts(size_t(x.size(0)), 0), state);
  return norm_and_project(spec, weights, core, gate(spec, projected), lora);
}

Tensor gated_delta_mixer_backward(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& dy,
                                  const GatedDeltaStash& stash, const Mamba2Rows& rows, const GatedDeltaWeights& grads,
                                  const GatedDeltaAdapters& lora) {
  const GatedDeltaColumns at(spec);
  const Tensor z = gate(spec, stash.projected);
  const Tensor normed = gated_norm(spec, weights, stash.core, z);  // recomputed, not kept
  const Tensor dnormed = project_backward(dy, normed, weights.out_proj, grads.out_proj, lora.out_proj);
  const ops::GatedRmsNormGrads dnorm =
      ops::gated_rms_norm_backward(per_head(spec, dnormed), per_head(spec, stash.core), per_head(spec, z), weights.norm,
                                   spec.v_head_dim, spec.norm_eps, grads.norm, ops::GatePlacement::AfterNorm);
  const ops::GatedDeltaInputs drule =
      ops::gated_delta_rule_backward(dnorm.dx.view(stash.core.shape()), rule_inputs(spec, stash.projected, stash.conv),
                                     rule_params(weights), spec.shape(), rows.starts, rule_params(grads));
  Tensor dconv = Tensor::empty(stash.conv.shape(), DType::F32);
  set_columns(dconv, at.q, drule.q);
  set_columns(dconv, at.k, drule.k);
  set_columns(dconv, at.v, drule.v);
  const Tensor qkv = columns(stash.projected, 0, spec.conv_channels());
  const Tensor dqkv = ops::mamba2_conv_backward(dconv, qkv, weights.conv, {}, rows.starts, grads.conv, {});
  Tensor dprojected = Tensor::empty(stash.projected.shape(), DType::F32);
  set_columns(dprojected, 0, dqkv);
  set_columns(dprojected, at.z, dnorm.dz.view(z.shape()));
  set_columns(dprojected, at.b, drule.b);
  set_columns(dprojected, at.a, drule.a);
  Tensor dx = project_backward(dprojected, stash.input, weights.in_proj, grads.in_proj, lora.in_proj);
  zero_padding(dx, rows.valid);
  return dx;
}

}  // namespace moetune::model
