#include "moetune/ops/nf4.h"

#include <algorithm>
#include <cmath>

namespace moetune::ops {
namespace {

// numpy's float32 pairwise sum (8 accumulators up to 128 values, halves above): bitsandbytes' offset is
// torch.mean, which rounds alike on the fixture.
float pairwise_sum(const float* a, int64_t n) {
  if (n < 8) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    float r[8];
    std::copy_n(a, 8, r);
    int64_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    float sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

}  // namespace

const std::array<float, 16>& nf4_code() {
  static const std::array<float, 16> code = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return code;
}

std::vector<uint8_t> nf4_pack(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> packed((codes.size() + 1) / 2);
  for (size_t i = 0; i < packed.size(); ++i)
    packed[i] = uint8_t(codes[2 * i] << 4 | (2 * i + 1 < codes.size() ? codes[2 * i + 1] : 7));
  return packed;
}

Tensor nf4_dequantize(const std::vector<uint8_t>& packed, const std::vector<float>& absmax, const Shape& shape) {
  Tensor out = Tensor::empty(shape, DType::F32);
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const uint8_t byte = packed[size_t(i / 2)];
    o[i] = nf4_code()[size_t(i % 2 ? byte & 15 : byte >> 4)] * absmax[size_t(i / kNf4BlockSize)];
  }
  return out;
}

Nf4Tensor nf4_quantize(const Tensor& x) {
  MOETUNE_CHECK(x.dtype() == DType::F32 && x.device().is_cpu(), "nf4_quantize: needs a CPU f32 tensor, got {}", x.str());
  Nf4Tensor q;
  q.shape = x.shape();
  const BlockCodes values = quantize_blocks(x.data<float>(), x.numel(), kNf4BlockSize, nf4_code().data(), 16);
  q.packed = nf4_pack(values.codes);
  q.offset = pairwise_sum(values.absmax.data(), int64_t(values.absmax.size())) / float(values.absmax.size());
  std::vector<float> centred(values.absmax.size());
  for (size_t i = 0; i < centred.size(); ++i) centred[i] = values.absmax[i] - q.offset;
  BlockCodes absmax = quantize_blocks(centred.data(), int64_t(centred.size()), kNf4AbsmaxBlockSize, dynamic_map_signed().data(), 256);
  q.absmax_codes = std::move(absmax.codes);
  q.absmax_scales = std::move(absmax.absmax);
  return q;
}

std::vector<float> nf4_absmax(const Nf4Tensor& q) {
  std::vector<float> absmax(q.absmax_codes.size());
  for (size_t i = 0; i < absmax.size(); ++i)
    absmax[i] = dynamic_map_signed()[q.absmax_codes[i]] * q.absmax_scales[i / kNf4AbsmaxBlockSize] + q.offset;
  return absmax;
}

Tensor nf4_dequantize(const Nf4Tensor& q) { return nf4_dequantize(q.packed, nf4_absmax(q), q.shape); }

}  // namespace moetune::ops
