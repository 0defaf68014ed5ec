#include <cmath>

#include "moetune/ops/gate.h"

namespace moetune::ops {
namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

Tensor sigmoid_gated_add(const Tensor& base, const Tensor& y, const Tensor& logits) {
  const int64_t tokens = y.size(0), width = y.size(1);
  MOETUNE_CHECK(base.shape() == y.shape() && logits.numel() == tokens, "sigmoid_gated_add: base {}, y {}, logits {}",
                base.str(), y.str(), logits.str());
  Tensor out = base.clone();
  for (int64_t t = 0; t < tokens; ++t) {
    const float gate = float(sigmoid(logits.data<float>()[t]));
    for (int64_t h = 0; h < width; ++h) out.data<float>()[t * width + h] += gate * y.data<float>()[t * width + h];
  }
  return out;
}

SigmoidGateGrads sigmoid_gated_add_backward(const Tensor& dout, const Tensor& y, const Tensor& logits) {
  const int64_t tokens = y.size(0), width = y.size(1);
  SigmoidGateGrads g{Tensor::empty(y.shape(), DType::F32), Tensor::empty({tokens, 1}, DType::F32)};
  for (int64_t t = 0; t < tokens; ++t) {
    const double gate = sigmoid(logits.data<float>()[t]);
    double dot = 0;
    for (int64_t h = 0; h < width; ++h) {
      const int64_t i = t * width + h;
      g.dy.data<float>()[i] = float(gate) * dout.data<float>()[i];
      dot += double(dout.data<float>()[i]) * double(y.data<float>()[i]);
    }
    g.dlogits.data<float>()[t] = float(dot * gate * (1.0 - gate));
  }
  return g;
}

Tensor sigmoid_gated(const Tensor& y, const Tensor& logits) {
  MOETUNE_CHECK(y.numel() == logits.numel(), "sigmoid_gated: y {}, logits {}", y.str(), logits.str());
  Tensor out = Tensor::empty(y.shape(), DType::F32);
  for (int64_t i = 0; i < y.numel(); ++i)
    out.data<float>()[i] = y.data<float>()[i] * float(sigmoid(logits.data<float>()[i]));
  return out;
}

SigmoidGateGrads sigmoid_gated_backward(const Tensor& dout, const Tensor& y, const Tensor& logits) {
  MOETUNE_CHECK(y.numel() == logits.numel() && dout.numel() == y.numel(),
                "sigmoid_gated_backward: dout {}, y {}, logits {}", dout.str(), y.str(), logits.str());
  SigmoidGateGrads g{Tensor::empty(y.shape(), DType::F32), Tensor::empty(logits.shape(), DType::F32)};
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double gate = sigmoid(logits.data<float>()[i]), d = dout.data<float>()[i];
    g.dy.data<float>()[i] = float(gate * d);
    g.dlogits.data<float>()[i] = float(d * double(y.data<float>()[i]) * gate * (1.0 - gate));
  }
  return g;
}

}  // namespace moetune::ops
