#include "moetune/model/cuda/mamba2_mixer_gpu.h"

#include "moetune/core/phase_profile.h"
#include "moetune/ops/cuda/gated_rms_norm.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/mamba2_scan.h"
#include "moetune/ops/cuda/mamba2_step.h"
#include "moetune/ops/document_starts.h"

namespace moetune::model::cuda {
namespace {

using ops::cuda::ColumnBlock;

Tensor device_bf16(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }

// Where z, xBC and dt lie in in_proj's output (or its gradient), and x, B, C in the conv's.
struct Split {
  const Mamba2Spec& spec;
  ColumnBlock z(const Tensor& projected) const { return {projected, 0, spec.inner()}; }
  ColumnBlock xbc(const Tensor& projected) const { return {projected, spec.inner(), spec.conv_channels()}; }
  ColumnBlock dt(const Tensor& projected) const {
    return {projected, spec.inner() + spec.conv_channels(), spec.num_heads};
  }
  ops::cuda::Mamba2ScanBlocks scan(const Tensor& projected, const Tensor& conv) const {
    const int64_t bc = spec.num_groups * spec.state_size;
    return {{conv, 0, spec.inner()}, dt(projected), {conv, spec.inner(), bc}, {conv, spec.inner() + bc, bc}};
  }
  int64_t group_size() const { return spec.norm_group_size(); }
};

Tensor gated_norm(const Mamba2Spec& spec, const Mamba2Weights& w, const Tensor& scan, const Tensor& projected) {
  const Split split{spec};
  Tensor normed = device_bf16({scan.size(0), spec.inner()});
  ops::cuda::gated_rms_norm_forward(scan, split.z(projected), w.norm, split.group_size(), spec.norm_eps, normed);
  return normed;
}

}  // namespace

Mamba2GpuRows upload_mamba2_rows(const Mamba2Rows& rows) {
  return {ops::cuda::upload_row_flags(rows.starts), ops::cuda::upload_row_flags(rows.valid),
          ops::document_start_rows(rows.starts)};
}

Tensor mamba2_mixer_forward_gpu(const Mamba2Spec& spec, int64_t chunk_size, const Mamba2Weights& w, const Tensor& x,
                                const Mamba2GpuRows& rows, Mamba2GpuStash* stash) {
  const Split split{spec};
  const int64_t tokens = x.size(0);
  Tensor input = x;
  if (rows.valid.defined()) {
    input = device_bf16(x.shape());
    ops::cuda::mask_padding_rows(x, rows.valid, input);
  }
  PhaseScope phase("mamba2.in_proj");
  Tensor projected = device_bf16({tokens, spec.projection()});
  ops::cuda::linear_forward(input, w.in_proj, w.in_proj_bias, projected);
  phase.next("mamba2.conv");
  Tensor conv = device_bf16({tokens, spec.conv_channels()});
  ops::cuda::mamba2_conv_forward(split.xbc(projected), w.conv, w.conv_bias, rows.starts, rows.valid, conv);
  phase.next("mamba2.scan");
  Tensor scan = device_bf16({tokens, spec.inner()});
  ops::cuda::mamba2_scan_forward(split.scan(projected, conv), {w.dt_bias, w.a_log, w.d}, spec.scan(), chunk_size,
                                 rows.starts, scan);
  phase.next("mamba2.norm+out_proj");
  const Tensor normed = gated_norm(spec, w, scan, projected);
  Tensor out = device_bf16({tokens, w.out_proj.size(0)});
  ops::cuda::linear_forward(normed, w.out_proj, w.out_proj_bias, out);
  if (stash) *stash = {input, projected, conv, scan};
  return out;
}

Tensor mamba2_mixer_step_gpu(const Mamba2Spec& spec, const Mamba2Weights& w, const Tensor& x, const Tensor& conv_window,
                             const Tensor& ssm_state) {
  const Split split{spec};
  const int64_t tokens = x.size(0);
  Tensor projected = device_bf16({tokens, spec.projection()});
  ops::cuda::linear_forward(x, w.in_proj, w.in_proj_bias, projected);
  Tensor conv = device_bf16({tokens, spec.conv_channels()});
  ops::cuda::mamba2_conv_step(split.xbc(projected), w.conv, w.conv_bias, conv_window, conv);
  Tensor scan = device_bf16({tokens, spec.inner()});
  // A prompt (several rows) takes the training's chunked scan, continuing the cache's state: the step kernel walks
  // rows one after another (a 4096-token prompt ~15 ms a layer), the chunked algorithm computes them in parallel.
  if (tokens > 1)
    ops::cuda::mamba2_scan_forward(split.scan(projected, conv), {w.dt_bias, w.a_log, w.d}, spec.scan(), spec.chunk_size,
                                   Tensor(), scan, ssm_state);
  else
    ops::cuda::mamba2_scan_step(split.scan(projected, conv), {w.dt_bias, w.a_log, w.d}, spec.scan(), ssm_state, scan);
  const Tensor normed = gated_norm(spec, w, scan, projected);
  Tensor out = device_bf16({tokens, w.out_proj.size(0)});
  ops::cuda::linear_forward(normed, w.out_proj, w.out_proj_bias, out);
  return out;
}

Tensor mamba2_mixer_backward_gpu(const Mamba2Spec& spec, int64_t chunk_size, const Mamba2Weights& w,
                                 const Tensor& dy, const Mamba2GpuStash& stash, const Mamba2GpuRows& rows,
                                 const Mamba2Weights& grads) {
  const Split split{spec};
  const int64_t tokens = dy.size(0);
  PhaseScope phase("mamba2.norm+out_proj.bwd");
  const Tensor normed = gated_norm(spec, w, stash.scan, stash.projected);
  Tensor dnormed = device_bf16({tokens, spec.inner()});
  ops::cuda::linear_backward(dy, normed, w.out_proj, dnormed, grads.out_proj, grads.out_proj_bias);

  // dprojected gets dz, d(xBC) and d(dt) in place, as in_proj's output held z, xBC and dt.
  Tensor dprojected = device_bf16(stash.projected.shape());
  Tensor dscan = device_bf16({tokens, spec.inner()});
  ops::cuda::gated_rms_norm_backward(dnormed, stash.scan, split.z(stash.projected), w.norm, split.group_size(),
                                     spec.norm_eps, dscan, split.z(dprojected), grads.norm);
  phase.next("mamba2.scan.bwd");
  Tensor dconv = device_bf16(stash.conv.shape());
  ops::cuda::mamba2_scan_backward(dscan, split.scan(stash.projected, stash.conv), {w.dt_bias, w.a_log, w.d},
                                  spec.scan(), chunk_size, rows.starts, split.scan(dprojected, dconv),
                                  {grads.dt_bias, grads.a_log, grads.d});
  // Padding rows of the conv output were zeroed: the conv backward reads their gradient as 0.
  phase.next("mamba2.conv.bwd");
  ops::cuda::mamba2_conv_backward(dconv, split.xbc(stash.projected), w.conv, w.conv_bias, rows.starts, rows.valid,
                                  split.xbc(dprojected), grads.conv, grads.conv_bias);
  phase.next("mamba2.in_proj.bwd");
  Tensor dx = device_bf16(stash.input.shape());
  ops::cuda::linear_backward(dprojected, stash.input, w.in_proj, dx, grads.in_proj, grads.in_proj_bias);
  if (rows.valid.defined()) ops::cuda::mask_padding_rows(dx, rows.valid, dx);
  return dx;
}

}  // namespace moetune::model::cuda
