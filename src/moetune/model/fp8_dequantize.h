// FP8 block-scaled checkpoints (DeepSeek-V3/R1, Kimi-K2 as released): a weight stored as float8_e4m3fn with a
// float32 `<name>_scale_inv` beside it, one scale per block of weight_block_size (128 x 128). Loading
// dequantises as transformers 5.17 does (Fp8Dequantize): fp8 -> fp32, times the block's scale in fp32, then
// rounded to the engine's dtype; saving writes bf16 and drops quantization_config.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "moetune/core/tensor.h"
#include "moetune/io/safetensors_folder.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

// "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj.weight_scale_inv".
std::string fp8_scale_name(const std::string& weight_name);

// Whether `name` in `files` is an FP8 weight with its block scales beside it.
bool is_fp8_block_scaled(const io::SafetensorsFolder& files, const std::string& name);

// config.json's quantization_config.weight_block_size (rows, columns); nullopt when the checkpoint is not
// FP8 block-scaled (GPT-OSS's mxfp4 included: model/mxfp4.h reads it). Refuses (naming the key) other
// quantisation methods.
std::optional<std::array<int64_t, 2>> fp8_block_size(const ModelSpec& spec);

// The exact value of one float8_e4m3fn byte (no infinities; 0x7f / 0xff are NaN).
float fp8_e4m3_to_float(uint8_t bits);

// weight [R, C] F8_E4M3 and scale_inv [ceil(R / rows), ceil(C / columns)] F32 -> the fp32 weight.
Tensor dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv, std::array<int64_t, 2> block,
                             const std::string& name);

// What loading does to config.json once the weights are dequantised: no quantization_config, dtype bf16.
void mark_dequantized(ModelSpec& spec);

}  // namespace moetune::model
