#include "moetune/model/mamba2_mixer.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/linear.h"

namespace moetune::model {
namespace {

// The conv output split into the scan's x, B and C, with the dt columns of in_proj's output.
ops::Mamba2ScanInputs scan_inputs(const Mamba2Spec& spec, const Tensor& projected, const Tensor& conv) {
  const int64_t bc = spec.num_groups * spec.state_size;
  return {columns(conv, 0, spec.inner()), columns(projected, spec.inner() + spec.conv_channels(), spec.num_heads),
          columns(conv, spec.inner(), bc), columns(conv, spec.inner() + bc, bc)};
}

Tensor gate(const Mamba2Spec& spec, const Tensor& projected) { return columns(projected, 0, spec.inner()); }

}  // namespace

Tensor causal_conv_step(const Tensor& conv_window, const Tensor& fresh_rows, const Tensor& weight, const Tensor& bias) {
  const int64_t fresh = fresh_rows.size(0), kept = conv_window.size(0), channels = fresh_rows.size(1);
  // The window's rows before the new ones: the conv over them, from a document start at the window's first row,
  // gives the new rows what the whole sequence's conv gives them (zeros before the sequence's start count as the
  // conv's own left padding).
  const Tensor joined = concatenate_rows(conv_window, fresh_rows);
  ops::DocumentStarts starts(size_t(kept + fresh), 0);
  starts[0] = 1;
  const Tensor conv = ops::mamba2_conv_forward(joined, weight, bias, starts).narrow(kept, fresh);
  std::copy_n(joined.data<float>() + fresh * channels, kept * channels, conv_window.data<float>());
  return conv;
}

Mamba2Rows mamba2_rows(const SequenceLayout& layout) {
  Mamba2Rows rows{ops::DocumentStarts(layout.positions.size()), layout.token_valid};
  for (size_t n = 0; n < rows.starts.size(); ++n) {
    const bool edge = !rows.valid.empty() && n > 0 && rows.valid[n] != rows.valid[n - 1];
    rows.starts[n] = layout.mask.document_start[n] == int64_t(n) || edge;
  }
  return rows;
}

Tensor mamba2_mixer_forward(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& x,
                            const Mamba2Rows& rows, Mamba2Stash* stash) {
  const Tensor input = masked(x, rows.valid);
  const Tensor projected = ops::linear_forward(input, weights.in_proj, weights.in_proj_bias);
  const Tensor xbc = columns(projected, spec.inner(), spec.conv_channels());
  const Tensor conv = ops::mamba2_conv_forward(xbc, weights.conv, weights.conv_bias, rows.starts);
  zero_padding(conv, rows.valid);
  const Tensor scan = ops::mamba2_scan_forward(scan_inputs(spec, projected, conv), {weights.dt_bias, weights.a_log, weights.d},
                                               spec.scan(), rows.starts);
  const Tensor normed =
      ops::gated_rms_norm_forward(scan, gate(spec, projected), weights.norm, spec.norm_group_size(), spec.norm_eps);
  if (stash) *stash = {input, projected, conv, scan};
  return ops::linear_forward(normed, weights.out_proj, weights.out_proj_bias);
}

Tensor mamba2_mixer_step(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& x,
                         const Tensor& conv_window, const Tensor& ssm_state) {
  const int64_t fresh = x.size(0);
  const Tensor projected = ops::linear_forward(x, weights.in_proj, weights.in_proj_bias);
  const Tensor conv = causal_conv_step(conv_window, columns(projected, spec.inner(), spec.conv_channels()),
                                       weights.conv, weights.conv_bias);
  const Tensor scan =
      ops::mamba2_scan_forward(scan_inputs(spec, projected, conv), {weights.dt_bias, weights.a_log, weights.d},
                               spec.scan(), ops::DocumentStarts(size_t(fresh), 0), ssm_state);
  const Tensor normed =
      ops::gated_rms_norm_forward(scan, gate(spec, projected), weights.norm, spec.norm_group_size(), spec.norm_eps);
  return ops::linear_forward(normed, weights.out_proj, weights.out_proj_bias);
}

Tensor mamba2_mixer_backward(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& dy,
                             const Mamba2Stash& stash, const Mamba2Rows& rows, const Mamba2Weights& grads) {
  const int64_t group_size = spec.norm_group_size();
  const Tensor z = gate(spec, stash.projected);
  const Tensor normed = ops::gated_rms_norm_forward(stash.scan, z, weights.norm, group_size, spec.norm_eps);
  const Tensor dnormed = ops::linear_backward(dy, normed, weights.out_proj, grads.out_proj, grads.out_proj_bias);
  const ops::GatedRmsNormGrads dnorm =
      ops::gated_rms_norm_backward(dnormed, stash.scan, z, weights.norm, group_size, spec.norm_eps, grads.norm);
  const ops::Mamba2ScanInputs dscan =
      ops::mamba2_scan_backward(dnorm.dx, scan_inputs(spec, stash.projected, stash.conv),
                                {weights.dt_bias, weights.a_log, weights.d}, spec.scan(), rows.starts,
                                {grads.dt_bias, grads.a_log, grads.d});
  Tensor dconv = Tensor::empty(stash.conv.shape(), DType::F32);
  set_columns(dconv, 0, dscan.x);
  set_columns(dconv, spec.inner(), dscan.b);
  set_columns(dconv, spec.inner() + spec.num_groups * spec.state_size, dscan.c);
  zero_padding(dconv, rows.valid);
  const Tensor xbc = columns(stash.projected, spec.inner(), spec.conv_channels());
  const Tensor dxbc = ops::mamba2_conv_backward(dconv, xbc, weights.conv, weights.conv_bias, rows.starts, grads.conv,
                                                grads.conv_bias);
  Tensor dprojected = Tensor::empty(stash.projected.shape(), DType::F32);
  set_columns(dprojected, 0, dnorm.dz);
  set_columns(dprojected, spec.inner(), dxbc);
  set_columns(dprojected, spec.inner() + spec.conv_channels(), dscan.dt);
  Tensor dx = ops::linear_backward(dprojected, stash.input, weights.in_proj, grads.in_proj, grads.in_proj_bias);
  zero_padding(dx, rows.valid);
  return dx;
}

}  // namespace moetune::model
