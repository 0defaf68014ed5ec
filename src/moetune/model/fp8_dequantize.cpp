#include "moetune/model/fp8_dequantize.h"

#include <cmath>
#include <limits>

#include "moetune/core/error.h"

namespace moetune::model {

std::string fp8_scale_name(const std::string& weight_name) { return weight_name + "_scale_inv"; }

bool is_fp8_block_scaled(const io::SafetensorsFolder& files, const std::string& name) {
  return files.contains(name) && files.entry(name).dtype == DType::F8_E4M3 && files.contains(fp8_scale_name(name));
}

std::optional<std::array<int64_t, 2>> fp8_block_size(const ModelSpec& spec) {
  const auto found = spec.json.find("quantization_config");
  if (found == spec.json.end() || found->is_null()) return std::nullopt;
  const nlohmann::json& q = *found;
  const std::string method = q.is_object() ? q.value("quant_method", std::string()) : std::string();
  const std::string format = q.is_object() ? q.value("fmt", std::string("e4m3")) : std::string();
  if (method == "mxfp4") return std::nullopt;  // GPT-OSS's experts: dequantized by model/mxfp4.h, no FP8 blocks
  if (method != "fp8" || format != "e4m3")
    fail("'quantization_config' is quant_method '{}', fmt '{}': only FP8 e4m3 block-scaled checkpoints (DeepSeek-V3 "
         "style) are dequantised on load",
         method.substr(0, 50), format.substr(0, 50));
  const nlohmann::json block = q.value("weight_block_size", nlohmann::json::array({128, 128}));
  if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() || !block[1].is_number_integer() ||
      block[0].get<int64_t>() <= 0 || block[1].get<int64_t>() <= 0)
    fail("'quantization_config.weight_block_size' must be two positive integers, got {}", block.dump().substr(0, 100));
  return std::array<int64_t, 2>{block[0].get<int64_t>(), block[1].get<int64_t>()};
}

float fp8_e4m3_to_float(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -9);  // subnormal: m/8 · 2^-6
  return sign * std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
}

Tensor dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv, std::array<int64_t, 2> block,
                             const std::string& name) {
  if (weight.dim() != 2 || weight.dtype() != DType::F8_E4M3)
    fail("FP8 weight '{}' must be a 2-D F8_E4M3 tensor, got {}", name, weight.str());
  const int64_t rows = weight.size(0), cols = weight.size(1);
  const int64_t scale_rows = (rows + block[0] - 1) / block[0], scale_cols = (cols + block[1] - 1) / block[1];
  if (scale_inv.dtype() != DType::F32 || scale_inv.shape() != Shape{scale_rows, scale_cols})
    fail("'{}' is {}; weight_block_size [{}, {}] on a [{}, {}] weight needs F32 [{}, {}]", fp8_scale_name(name),
         scale_inv.str(), block[0], block[1], rows, cols, scale_rows, scale_cols);
  Tensor out = Tensor::empty({rows, cols}, DType::F32);
  const auto* in = static_cast<const uint8_t*>(weight.raw_data());
  const float* scale = scale_inv.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)  // one fp32 product per element, as transformers' (q * s)
      o[r * cols + c] = fp8_e4m3_to_float(in[r * cols + c]) * scale[(r / block[0]) * scale_cols + c / block[1]];
  return out;
}

void mark_dequantized(ModelSpec& spec) {
  spec.json.erase("quantization_config");
  spec.json[spec.json.contains("torch_dtype") && !spec.json.contains("dtype") ? "torch_dtype" : "dtype"] = "bfloat16";
  spec.dtype = DType::BF16;
}

}  // namespace moetune::model
