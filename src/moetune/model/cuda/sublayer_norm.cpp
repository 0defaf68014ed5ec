#include "moetune/model/cuda/sublayer_norm.h"

#include "moetune/model/cuda/norm_for_backward.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(const Tensor& t) { return Tensor::empty(t.shape(), DType::BF16, Device::cuda()); }
}  // namespace

Tensor input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset) {
  if (!norm.defined()) return h;
  Tensor normed = device_like(h);
  ops::cuda::rms_norm_forward(h, norm.value, eps, normed, weight_offset);
  return normed;
}

Tensor masked_input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset,
                                 const Tensor& valid) {
  Tensor normed = input_norm_forward(h, norm, eps, weight_offset);
  if (valid.defined()) ops::cuda::mask_padding_rows(normed, valid, normed);
  return normed;
}

Tensor input_norm_for_backward(const Tensor& kept, const Tensor& h, const Param& norm, double eps,
                               float weight_offset) {
  return norm.defined() ? norm_for_backward(kept, h, norm.value, eps, h.shape(), weight_offset) : h;
}

void input_norm_backward(const Tensor& dnormed, const Tensor& h, const Param& norm, double eps, const Tensor& dh,
                         const Tensor& dout, float weight_offset) {
  if (norm.defined())
    ops::cuda::rms_norm_backward(dnormed, h, norm.value, eps, dh, norm.grad, /*residual=*/dout, weight_offset);
  else
    ops::cuda::add(dnormed, dout, dh);
}

void OutputNorm::forward(const Tensor& mixed, const Tensor& h, const Tensor& out, bool keep) {
  if (!norm_.defined()) {  // the residual scale alone
    ops::cuda::add(h, mixed, out, residual_scale_);
    return;
  }
  ops::cuda::rms_norm_forward(mixed, norm_.value, eps_, out, weight_offset_);
  ops::cuda::add(h, out, out, residual_scale_);
  if (keep) mixed_ = mixed;
}

Tensor OutputNorm::backward(const Tensor& dout) const {
  if (!defined()) return dout;
  Tensor dmixed = device_like(dout);
  if (residual_scale_ != 1.0f) ops::cuda::scale(dout, residual_scale_, dmixed);
  if (norm_.defined())
    ops::cuda::rms_norm_backward(residual_scale_ != 1.0f ? dmixed : dout, mixed_, norm_.value, eps_, dmixed, norm_.grad,
                                 {}, weight_offset_);
  return dmixed;
}

}  // namespace moetune::model::cuda
