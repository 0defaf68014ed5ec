#include <algorithm>

#include "moetune/ops/relu_squared.h"

namespace moetune::ops {

Tensor relu_squared_forward(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float r = std::max(x.data<float>()[i], 0.0f);
    out.data<float>()[i] = r * r;
  }
  return out;
}

Tensor relu_squared_backward(const Tensor& dout, const Tensor& x) {
  Tensor dx = Tensor::empty(x.shape(), DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i)
    dx.data<float>()[i] = dout.data<float>()[i] * 2.0f * std::max(x.data<float>()[i], 0.0f);
  return dx;
}

}  // namespace moetune::ops
