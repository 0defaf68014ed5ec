#include "moetune/model/mxfp4.h"

#include <cmath>

#include "moetune/core/half.h"
#include "moetune/model/piece_transform.h"

namespace moetune::model {
namespace {

constexpr float kE2m1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
constexpr int64_t kBlockBytes = 16;  // 32 four-bit codes

std::string blocks_name(const std::string& name) { return name + "_blocks"; }
std::string scales_name(const std::string& name) { return name + "_scales"; }

}  // namespace

Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales) {
  const Shape& shape = blocks.shape();
  MOETUNE_CHECK(blocks.dtype() == DType::U8 && scales.dtype() == DType::U8 && shape.size() >= 2 &&
                    shape.back() == kBlockBytes && Shape(shape.begin(), shape.end() - 1) == scales.shape(),
                "MXFP4: blocks {} and scales {} do not fit together", blocks.str(), scales.str());
  Shape out_shape(shape.begin(), shape.end() - 1);
  out_shape.back() *= 2 * kBlockBytes;
  Tensor out = Tensor::empty(out_shape, DType::BF16);
  const auto* codes = static_cast<const uint8_t*>(blocks.raw_data());
  const auto* exponents = static_cast<const uint8_t*>(scales.raw_data());
  auto* to = static_cast<uint16_t*>(out.raw_data());
  for (int64_t g = 0; g < scales.numel(); ++g) {
    // torch.ldexp(lut value, scale - 127): the power of two in fp32 (2^128 overflows to inf as there).
    const float power = std::ldexp(1.0f, int(exponents[g]) - 127);
    for (int64_t b = 0; b < kBlockBytes; ++b) {
      const uint8_t byte = codes[g * kBlockBytes + b];
      to[(g * kBlockBytes + b) * 2] = f32_to_bf16(kE2m1[byte & 0x0F] * power);
      to[(g * kBlockBytes + b) * 2 + 1] = f32_to_bf16(kE2m1[byte >> 4] * power);
    }
  }
  return out;
}

bool holds_mxfp4(const io::SafetensorsFolder& files, const std::string& name) {
  return !files.contains(name) && files.contains(blocks_name(name)) && files.contains(scales_name(name));
}

Shape mxfp4_tensor_shape(const io::SafetensorsFolder& files, const std::string& name) {
  const io::SafetensorsEntry &blocks = files.entry(blocks_name(name)), &scales = files.entry(scales_name(name));
  const Shape& b = blocks.shape;
  if (blocks.dtype != DType::U8 || scales.dtype != DType::U8 || b.size() != 4 || b[3] != kBlockBytes ||
      scales.shape != Shape{b[0], b[1], b[2]})
    fail("{}: MXFP4 tensors '{}' ({} {}) and '{}' ({} {}) must be U8 [E, rows, K/32, 16] and U8 [E, rows, K/32]",
         files.file_of(blocks_name(name)).path().string(), blocks_name(name), dtype_name(blocks.dtype), shape_str(b),
         scales_name(name), dtype_name(scales.dtype), shape_str(scales.shape));
  return {b[0], b[2] * 2 * kBlockBytes, b[1]};
}

Tensor read_mxfp4(const io::SafetensorsFolder& files, const std::string& name) {
  mxfp4_tensor_shape(files, name);  // checks the pair
  return transpose_last_two(dequantize_mxfp4(files.tensor(blocks_name(name)), files.tensor(scales_name(name))));
}

}  // namespace moetune::model
