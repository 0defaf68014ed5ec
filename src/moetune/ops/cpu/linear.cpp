#include <cblas.h>

#include "moetune/ops/linear.h"

namespace moetune::ops {

Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  MOETUNE_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear: x {} with weight {}",
                x.str(), weight.str());
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  Tensor y = Tensor::empty({rows, out}, DType::F32);
  float* yd = y.data<float>();
  if (bias.defined()) {
    MOETUNE_CHECK(bias.numel() == out, "linear: bias {} for {} outputs", bias.str(), out);
    for (int64_t r = 0; r < rows; ++r) std::copy(bias.data<float>(), bias.data<float>() + out, yd + r * out);
  }
  if (rows == 0 || out == 0) return y;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out), int(in), 1.0f, x.data<float>(), int(in),
              weight.data<float>(), int(in), bias.defined() ? 1.0f : 0.0f, yd, int(out));
  return y;
}

Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dweight,
                       const Tensor& dbias) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  MOETUNE_CHECK(dy.dim() == 2 && dy.size(0) == rows && dy.size(1) == out &&
                    (!dweight.defined() || dweight.shape() == weight.shape()),
                "linear_backward: dy {}, x {}, weight {}, dweight {}", dy.str(), x.str(), weight.str(), dweight.str());
  Tensor dx = Tensor::zeros({rows, in}, DType::F32);
  if (rows == 0) return dx;
  if (out > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(in), int(out), 1.0f, dy.data<float>(), int(out),
                weight.data<float>(), int(in), 0.0f, dx.data<float>(), int(in));
    if (dweight.defined())  // undefined: a frozen weight
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(out), int(in), int(rows), 1.0f, dy.data<float>(), int(out),
                  x.data<float>(), int(in), 1.0f, dweight.data<float>(), int(in));
  }
  if (dbias.defined())
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) dbias.data<float>()[o] += dy.data<float>()[r * out + o];
  return dx;
}

}  // namespace moetune::ops
