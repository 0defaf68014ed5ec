#include <cmath>

#include "moetune/core/error.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void check_conv(const Tensor& xbc, const Tensor& weight, const Tensor& bias, const DocumentStarts& starts) {
  MOETUNE_CHECK(xbc.dim() == 2 && weight.dim() == 2 && weight.size(0) == xbc.size(1),
                "mamba2 conv: xbc {} and weight {} disagree (want [N, C] and [C, K])", xbc.str(), weight.str());
  MOETUNE_CHECK(!bias.defined() || bias.numel() == xbc.size(1), "mamba2 conv: bias {} for {} channels", bias.str(),
                xbc.size(1));
  MOETUNE_CHECK(int64_t(starts.size()) == xbc.size(0), "mamba2 conv: {} document-start flags for {} rows",
                starts.size(), xbc.size(0));
}

// first[n]: the first row of n's document, the earliest row its window may read.
std::vector<int64_t> document_firsts(const DocumentStarts& starts) {
  std::vector<int64_t> first(starts.size());
  for (size_t n = 0; n < starts.size(); ++n) first[n] = (n == 0 || starts[n]) ? int64_t(n) : first[n - 1];
  return first;
}

// The conv before its SiLU, [N, C].
Tensor conv_preactivation(const Tensor& xbc, const Tensor& weight, const Tensor& bias, const std::vector<int64_t>& first) {
  const int64_t rows = xbc.size(0), channels = xbc.size(1), kernel = weight.size(1);
  Tensor pre = Tensor::empty({rows, channels}, DType::F32);
  const float* x = xbc.data<float>();
  const float* w = weight.data<float>();
  for (int64_t n = 0; n < rows; ++n) {
    float* out = pre.data<float>() + n * channels;
    for (int64_t ch = 0; ch < channels; ++ch) out[ch] = bias.defined() ? bias.data<float>()[ch] : 0.0f;
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t source = n - (kernel - 1) + k;
      if (source < first[size_t(n)]) continue;
      for (int64_t ch = 0; ch < channels; ++ch) out[ch] += w[ch * kernel + k] * x[source * channels + ch];
    }
  }
  return pre;
}

}  // namespace

Tensor mamba2_conv_forward(const Tensor& xbc, const Tensor& weight, const Tensor& bias, const DocumentStarts& starts) {
  check_conv(xbc, weight, bias, starts);
  Tensor out = conv_preactivation(xbc, weight, bias, document_firsts(starts));
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] *= sigmoid(o[i]);
  return out;
}

Tensor mamba2_conv_backward(const Tensor& dout, const Tensor& xbc, const Tensor& weight, const Tensor& bias,
                            const DocumentStarts& starts, const Tensor& dweight, const Tensor& dbias) {
  check_conv(xbc, weight, bias, starts);
  const std::vector<int64_t> first = document_firsts(starts);
  Tensor dpre = conv_preactivation(xbc, weight, bias, first);
  float* dp = dpre.data<float>();
  const float* d = dout.data<float>();
  for (int64_t i = 0; i < dpre.numel(); ++i) {
    const float s = sigmoid(dp[i]);
    dp[i] = d[i] * s * (1.0f + dp[i] * (1.0f - s));  // d silu = s (1 + x (1 - s))
  }
  const int64_t rows = xbc.size(0), channels = xbc.size(1), kernel = weight.size(1);
  Tensor dxbc = Tensor::zeros(xbc.shape(), DType::F32);
  const float* x = xbc.data<float>();
  const float* w = weight.data<float>();
  float* dx = dxbc.data<float>();
  for (int64_t n = 0; n < rows; ++n) {
    const float* g = dp + n * channels;
    if (dbias.defined())
      for (int64_t ch = 0; ch < channels; ++ch) dbias.data<float>()[ch] += g[ch];
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t source = n - (kernel - 1) + k;
      if (source < first[size_t(n)]) continue;
      for (int64_t ch = 0; ch < channels; ++ch) {
        dx[source * channels + ch] += g[ch] * w[ch * kernel + k];
        if (dweight.defined()) dweight.data<float>()[ch * kernel + k] += g[ch] * x[source * channels + ch];
      }
    }
  }
  return dxbc;
}

}  // namespace moetune::ops
