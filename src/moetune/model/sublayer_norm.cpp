#include "moetune/model/sublayer_norm.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

Tensor input_norm_forward(const Tensor& h, const Param& norm, double eps, float weight_offset) {
  return norm.defined() ? ops::rms_norm_forward(h, norm.value, eps, weight_offset) : h;
}

Tensor input_norm_backward(const Tensor& dnormed, const Tensor& h, const Param& norm, double eps, const Tensor& dout,
                           float weight_offset) {
  return add(dout,
             norm.defined() ? ops::rms_norm_backward(dnormed, h, norm.value, eps, norm.grad, weight_offset) : dnormed);
}

Tensor OutputNorm::forward(const Tensor& mixed, const Tensor& h) {
  Tensor out = mixed;
  if (norm_.defined()) {
    mixed_ = mixed;
    out = ops::rms_norm_forward(mixed, norm_.value, eps_, weight_offset_);
  }
  return add(h, residual_scale_ != 1.0 ? scaled(out, residual_scale_) : out);
}

Tensor OutputNorm::backward(const Tensor& dout) const {
  const Tensor dnormed = residual_scale_ != 1.0 ? scaled(dout, residual_scale_) : dout;
  return norm_.defined() ? ops::rms_norm_backward(dnormed, mixed_, norm_.value, eps_, norm_.grad, weight_offset_)
                         : dnormed;
}

}  // namespace moetune::model
