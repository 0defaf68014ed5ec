#include "moetune/model/cuda/gated_delta_mixer_gpu.h"

#include "moetune/core/phase_profile.h"
#include "moetune/ops/cuda/gated_delta_rule.h"
#include "moetune/ops/cuda/gated_rms_norm.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/mamba2_step.h"

namespace moetune::model::cuda {
namespace {

using ops::cuda::ColumnBlock;

Tensor device_bf16(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }

// Column blocks of in_proj's output (or its gradient) and of the conv's, where GatedDeltaColumns says.
struct Split {
  const GatedDeltaSpec& spec;
  GatedDeltaColumns at{spec};
  ColumnBlock qkv(const Tensor& projected) const { return {projected, at.q, spec.conv_channels()}; }
  ColumnBlock z(const Tensor& projected) const { return {projected, at.z, spec.value_dim()}; }
  ops::cuda::GatedDeltaBlocks rule(const Tensor& projected, const Tensor& conv) const {
    return {{conv, at.q, spec.key_dim()},
            {conv, at.k, spec.key_dim()},
            {conv, at.v, spec.value_dim()},
            {projected, at.a, spec.num_v_heads},
            {projected, at.b, spec.num_v_heads}};
  }
};

// The rule's output normed per value head (the norm's weight [Dv] shared by the heads), then gated by silu(z).
Tensor gated_norm(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& core, const Tensor& projected) {
  Tensor normed = device_bf16(core.shape());
  ops::cuda::gated_rms_norm_forward(core, Split{spec}.z(projected), w.norm, spec.v_head_dim, spec.norm_eps, normed,
                                    ops::GatePlacement::AfterNorm);
  return normed;
}

// y = x Wᵀ plus the projection's adapters.
Tensor project(const Tensor& x, const Tensor& weight, LoraLinear* lora, LoraPass pass) {
  Tensor y = device_bf16({x.size(0), weight.size(0)});
  ops::cuda::linear_forward(x, weight, Tensor(), y);
  if (lora) lora->forward(x, y, pass);
  return y;
}

// d(x) of project's y; the weight's gradient (where not frozen) and the adapters' accumulate.
Tensor project_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dweight,
                        LoraLinear* lora) {
  Tensor dx = device_bf16(x.shape());
  ops::cuda::linear_backward(dy, x, weight, dx, dweight, Tensor());
  if (lora) lora->backward(dy, x, dx);
  return dx;
}

}  // namespace

Tensor gated_delta_mixer_forward_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& x,
                                     const Mamba2GpuRows& rows, GatedDeltaGpuStash* stash,
                                     const GatedDeltaGpuAdapters& lora) {
  const Split split{spec};
  Tensor input = x;
  if (rows.valid.defined()) {
    input = device_bf16(x.shape());
    ops::cuda::mask_padding_rows(x, rows.valid, input);
  }
  PhaseScope phase("gated_delta.in_proj");
  const Tensor projected = project(input, w.in_proj, lora.in_proj, lora.pass);
  phase.next("gated_delta.conv");
  Tensor conv = device_bf16({x.size(0), spec.conv_channels()});
  ops::cuda::mamba2_conv_forward(split.qkv(projected), w.conv, Tensor(), rows.starts, rows.valid, conv);
  phase.next("gated_delta.rule");
  Tensor core = device_bf16({x.size(0), spec.value_dim()});
  ops::cuda::gated_delta_rule_forward(split.rule(projected, conv), w.dt_bias, w.a_log, spec.shape(), rows.starts, core,
                                      Tensor(), rows.start_rows);
  phase.next("gated_delta.norm+out_proj");
  Tensor out = project(gated_norm(spec, w, core, projected), w.out_proj, lora.out_proj, lora.pass);
  if (stash) *stash = {input, projected, conv, core};
  return out;
}

Tensor gated_delta_mixer_step_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& x,
                                  const Tensor& conv_window, const Tensor& state, const GatedDeltaGpuAdapters& lora) {
  const Split split{spec};
  const Tensor projected = project(x, w.in_proj, lora.in_proj, lora.pass);
  Tensor conv = device_bf16({x.size(0), spec.conv_channels()});
  ops::cuda::mamba2_conv_step(split.qkv(projected), w.conv, Tensor(), conv_window, conv);
  Tensor core = device_bf16({x.size(0), spec.value_dim()});
  ops::cuda::gated_delta_rule_forward(split.rule(projected, conv), w.dt_bias, w.a_log, spec.shape(), Tensor(), core,
                                      state);
  return project(gated_norm(spec, w, core, projected), w.out_proj, lora.out_proj, lora.pass);
}

Tensor gated_delta_mixer_backward_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& w, const Tensor& dy,
                                      const GatedDeltaGpuStash& stash, const Mamba2GpuRows& rows,
                                      const GatedDeltaWeights& grads, const GatedDeltaGpuAdapters& lora) {
  const Split split{spec};
  PhaseScope phase("gated_delta.norm+out_proj.bwd");
  const Tensor normed = gated_norm(spec, w, stash.core, stash.projected);  // recomputed, not kept
  const Tensor dnormed = project_backward(dy, normed, w.out_proj, grads.out_proj, lora.out_proj);

  // dprojected gets dz, da, db and d(qkv) in place, where in_proj's output held them.
  Tensor dprojected = device_bf16(stash.projected.shape());
  Tensor dcore = device_bf16(stash.core.shape());
  ops::cuda::gated_rms_norm_backward(dnormed, stash.core, split.z(stash.projected), w.norm, spec.v_head_dim,
                                     spec.norm_eps, dcore, split.z(dprojected), grads.norm,
                                     ops::GatePlacement::AfterNorm);
  phase.next("gated_delta.rule.bwd");
  Tensor dconv = device_bf16(stash.conv.shape());
  ops::cuda::gated_delta_rule_backward(dcore, split.rule(stash.projected, stash.conv), w.dt_bias, w.a_log, spec.shape(),
                                       rows.starts, split.rule(dprojected, dconv), grads.dt_bias, grads.a_log,
                                       rows.start_rows);
  // Padding rows of the conv output were zeroed: the conv backward reads their gradient as 0.
  phase.next("gated_delta.conv.bwd");
  ops::cuda::mamba2_conv_backward(dconv, split.qkv(stash.projected), w.conv, Tensor(), rows.starts, rows.valid,
                                  split.qkv(dprojected), grads.conv, Tensor());
  phase.next("gated_delta.in_proj.bwd");
  Tensor dx = project_backward(dprojected, stash.input, w.in_proj, grads.in_proj, lora.in_proj);
  if (rows.valid.defined()) ops::cuda::mask_padding_rows(dx, rows.valid, dx);
  return dx;
}

}  // namespace moetune::model::cuda
