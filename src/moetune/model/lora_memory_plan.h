// The memory plan of a LoRA or QLoRA fine-tune on the GPU engine, beside a full fine-tune's
// (model/memory_plan.h): the frozen base holds its weights alone (no gradient, no optimizer state); QLoRA's base
// holds its NF4 bytes and one layer's bf16 scratch (model/cuda/nf4_base.h); and each adapter keeps
// u = x·Aᵀ (bf16, rank wide) per token, per routed row for the experts, unless training.recompute recomputes its
// sublayer (then its forward runs again and makes u anew, and only the sublayer's input is kept).
#pragma once

#include <cstdint>

#include "moetune/model/parameter_layout.h"
#include "moetune/model/recompute.h"

namespace moetune::model {

struct LoraConfig;

// `layout` with the adapters of `config` appended and the base frozen (as attach_lora leaves a model; the
// modules_to_save, being small, are left frozen here).
ParameterLayout with_lora(ParameterLayout layout, const LoraConfig& config);

// What the adapters of a with_lora() layout keep for the backward pass for `tokens` tokens per micro-batch.
int64_t lora_gpu_stash_bytes(const ParameterLayout& layout, int64_t rank, int64_t tokens, Recompute recompute,
                             int64_t keep_last_layers = 0);

// QLoRA's frozen base on the GPU: the NF4 bytes of the weights it quantizes (frozen Matmul / Experts), and the
// bf16 scratch that the largest layer's weights are dequantized into.
struct Nf4BasePlan {
  int64_t quantized_parameters = 0;
  int64_t nf4_bytes = 0;
  int64_t scratch_bytes = 0;
};
Nf4BasePlan nf4_base_plan(const ParameterLayout& layout);

}  // namespace moetune::model
