// training.micro_batch_size: auto. The memory plan (model/memory_plan.h: the static bytes of the optimizer
// precision, and the GPU step's activations for a micro-batch) picks the largest micro-batch that fits the GPU
// with a margin; when not even one row fits, recomputation is turned on (experts, then full). A larger
// micro-batch than about 16 K tokens buys nothing (the GEMMs are saturated) but memory, so that is the cap.
#pragma once

#include <cstdint>
#include <string>

#include "moetune/model/memory_plan.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::train {

struct MicroBatchFit {
  int64_t micro_batch_size = 0;   // 0: nothing fits
  model::Recompute recompute = model::Recompute::None;
  int64_t planned_bytes = 0;      // the plan's peak at that choice
  int64_t usable_bytes = 0;       // the GPU's memory less the margin
  std::string reason;             // one line for the log: the choice and why
};

// The margin: CUDA's context, cuBLAS/cuDNN handles and the allocator's rounding, outside the plan.
int64_t usable_gpu_bytes(int64_t device_bytes);

// LoRA's part of the plan (model/lora_memory_plan.h): the layout is then with_lora()'s (the base frozen: its
// weights alone), the adapters' stash is added, and with an NF4 base (QLoRA) the quantized weights count their
// NF4 bytes and one layer's bf16 scratch instead of bf16.
struct LoraFit {
  int64_t rank = 0;  // 0: no LoRA
  bool nf4_base = false;
};

// training.recompute_keep_layers: with recomputation on, the last this many layers keep their stash anyway.
// training.lm_head_chunk_rows: the fused LM head's chunk height (0: ops/lm_head_chunk.h's rule).

// `recompute` is the recipe's mode: the fit may raise it from none, never lower it.
// `update_in_backward`: the gradients held are gradient_parameters_held's.
MicroBatchFit fit_micro_batch(const model::ParameterLayout& layout, const model::PrecisionPlan& precision,
                              int64_t sequence_length, int64_t device_bytes, model::Recompute recompute,
                              bool update_in_backward = false, LoraFit lora = {}, int64_t keep_last_layers = 0,
                              int64_t lm_head_chunk_rows = 0);

// The plan's peak for one configuration: static (weights; gradients and optimizer state of the trainable
// parameters) plus activations.
int64_t planned_peak_bytes(const model::ParameterLayout& layout, const model::PrecisionPlan& precision, int64_t tokens,
                           model::Recompute recompute, bool update_in_backward = false, LoraFit lora = {},
                           int64_t keep_last_layers = 0, int64_t lm_head_chunk_rows = 0);

// optimizer.precision (+ "+int8" for optimizer.state int8) -> its plan; fails naming the precision.
const model::PrecisionPlan& precision_plan(const std::string& precision, const std::string& state);

}  // namespace moetune::train
