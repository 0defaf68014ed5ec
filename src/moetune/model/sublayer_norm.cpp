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
  if (!norm_.defined()) return add(h, mixed);
  mixed_ = mixed;
  return add(h, ops::rms_norm_forward(mixed, norm_.value, eps_, weight_offset_));
}

Tensor OutputNorm::backward(const Tensor& dout) const {
  return norm_.defined() ? ops::rms_norm_backward(dout, mixed_, norm_.value, eps_, norm_.grad, weight_offset_) : dout;
}

}  // namespace moetune::model
