// QLoRA's frozen base on the CPU: the projection and expert weights (ParameterRole Matmul and Experts, as
// bitsandbytes quantizes a model's linear layers; embeddings, norms, router and LM head stay as they are) are
// quantized to NF4 (ops/nf4.h, double-quantized) and held as their dequantized fp32 values. Every GEMM then
// computes with exactly the weights a dequantize-per-use kernel would feed it; the CPU reference keeps them in
// fp32 for simplicity, so it saves no memory (the GPU engine is where NF4 storage pays).
#pragma once

#include "moetune/model/checkpoint.h"

namespace moetune::model {

// Rounds every frozen Matmul / Experts parameter through NF4 in place. Returns the bytes NF4 storage of them takes.
size_t round_frozen_weights_to_nf4(ModelWeights& weights);
// Whether QLoRA quantizes this parameter.
bool quantized_by_qlora(const ParameterSpec& spec);

}  // namespace moetune::model
