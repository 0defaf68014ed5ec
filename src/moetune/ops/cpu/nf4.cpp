#include "moetune/ops/nf4.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "moetune/core/half.h"

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

// The NF4 codes of x (f32 or bf16) packed two a byte, and the blocks' absmax values: `threads` runs of whole
// blocks (an even count of values each, so no byte is shared between runs) coded at once.
struct PackedBlocks {
  std::vector<uint8_t> packed;
  std::vector<float> absmax;
};

PackedBlocks code_blocks(const Tensor& x, int threads) {
  const int64_t n = x.numel(), blocks = (n + kNf4BlockSize - 1) / kNf4BlockSize;
  PackedBlocks out{std::vector<uint8_t>(size_t((n + 1) / 2)), std::vector<float>(size_t(blocks))};
  const std::vector<float> midpoints = code_midpoints(nf4_code().data(), 16);
  const int64_t per_run = (blocks + threads - 1) / std::max(threads, 1);
  auto run = [&](int64_t first_block, int64_t end_block) {
    std::vector<float> block(static_cast<size_t>(kNf4BlockSize));
    std::vector<uint8_t> codes(size_t(kNf4BlockSize) + 1, 7);  // a padded odd tail codes 0.0
    for (int64_t b = first_block; b < end_block; ++b) {
      const int64_t first = b * kNf4BlockSize, size = std::min(kNf4BlockSize, n - first);
      if (x.dtype() == DType::F32) {
        std::copy_n(x.data<float>() + first, size, block.begin());
      } else {
        const uint16_t* bits = static_cast<const uint16_t*>(x.raw_data()) + first;
        for (int64_t i = 0; i < size; ++i) block[size_t(i)] = bf16_to_f32(bits[i]);
      }
      codes[size_t(size)] = 7;
      out.absmax[size_t(b)] = quantize_block(block.data(), size, size == kNf4BlockSize, midpoints, codes.data());
      for (int64_t i = 0; i < size; i += 2) out.packed[size_t((first + i) / 2)] = uint8_t(codes[size_t(i)] << 4 | codes[size_t(i + 1)]);
    }
  };
  std::vector<std::thread> workers;
  for (int64_t first = per_run; first < blocks; first += per_run) workers.emplace_back(run, first, std::min(blocks, first + per_run));
  run(0, std::min(blocks, per_run));
  for (std::thread& worker : workers) worker.join();
  return out;
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

Nf4Tensor nf4_quantize(const Tensor& x, int threads) {
  MOETUNE_CHECK((x.dtype() == DType::F32 || x.dtype() == DType::BF16) && x.device().is_cpu(),
                "nf4_quantize: needs a CPU f32 or bf16 tensor, got {}", x.str());
  Nf4Tensor q;
  q.shape = x.shape();
  PackedBlocks values = code_blocks(x, threads);
  q.packed = std::move(values.packed);
  q.offset = nf4_absmax_mean(values.absmax);
  std::vector<float> centred(values.absmax.size());
  for (size_t i = 0; i < centred.size(); ++i) centred[i] = values.absmax[i] - q.offset;
  BlockCodes absmax = quantize_blocks(centred.data(), int64_t(centred.size()), kNf4AbsmaxBlockSize, dynamic_map_signed().data(), 256);
  q.absmax_codes = std::move(absmax.codes);
  q.absmax_scales = std::move(absmax.absmax);
  return q;
}

float nf4_absmax_mean(const std::vector<float>& absmax) {
  return pairwise_sum(absmax.data(), int64_t(absmax.size())) / float(absmax.size());
}

std::vector<float> nf4_absmax(const Nf4Tensor& q) {
  std::vector<float> absmax(q.absmax_codes.size());
  for (size_t i = 0; i < absmax.size(); ++i)
    absmax[i] = dynamic_map_signed()[q.absmax_codes[i]] * q.absmax_scales[i / kNf4AbsmaxBlockSize] + q.offset;
  return absmax;
}

Tensor nf4_dequantize(const Nf4Tensor& q) { return nf4_dequantize(q.packed, nf4_absmax(q), q.shape); }

}  // namespace moetune::ops
