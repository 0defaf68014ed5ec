// MXFP4 (OCP Microscaling: 32 E2M1 values share one E8M0 power-of-two scale), as the released gpt-oss checkpoints
// store their experts: <name>_blocks U8 [E, rows, K/32, 16] (two 4-bit codes per byte, the low nibble the even
// element) and <name>_scales U8 [E, rows, K/32] (exponent + 127). The engine trains the dequantized weights:
// loading gives, bit for bit, the bf16 tensor transformers' dequantizing path (integrations/mxfp4.py,
// convert_moe_packed_tensors) loads in place of <name>, which is [E, K, rows] (transposed).
#pragma once

#include <string>

#include "moetune/core/tensor.h"
#include "moetune/io/safetensors_folder.h"

namespace moetune::model {

// blocks [..., G, 16] U8 and scales [..., G] U8 -> [..., G·32] BF16: code c of element i is ±{0, .5, 1, 1.5, 2,
// 3, 4, 6}[c & 7] (c ≥ 8 negative), times 2^(scale − 127) in fp32, rounded to bf16 (exact but where it overflows).
Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales);

// Whether the folder holds `name` as MXFP4 (<name>_blocks and <name>_scales) rather than as itself.
bool holds_mxfp4(const io::SafetensorsFolder& files, const std::string& name);
// The shape `name` has once dequantized, [E, K, rows]; errors name the tensors whose shapes or dtypes are wrong.
Shape mxfp4_tensor_shape(const io::SafetensorsFolder& files, const std::string& name);
// `name` dequantized, as transformers loads it: BF16 [E, K, rows].
Tensor read_mxfp4(const io::SafetensorsFolder& files, const std::string& name);

}  // namespace moetune::model
