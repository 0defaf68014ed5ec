// What a CPU block needs about the step besides its input (model/cuda/step_context.h is the GPU's): the batch's
// layout (positions, documents, padding) and, in the backward pass, the aux loss's gradient for each MoE
// sublayer's router logits (the loss reads every MoE layer's logits at once, so it is computed before the walk).
#pragma once

#include <vector>

#include "moetune/model/kv_cache.h"
#include "moetune/model/sequence_layout.h"

namespace moetune::model {

struct StepContext {
  SequenceLayout layout;
  std::vector<Tensor> drouter_logits;  // per MoE sublayer in walk order; empty without the aux loss
  bool training = false;               // a training step (forward_backward): LoRA dropout applies
  uint64_t lora_draw = 0;              // which masks LoRA dropout draws (ops/lora_dropout.h)
  KvCache* kv_cache = nullptr;         // generation: the attention reads and extends the sequence's keys and values

  // training.recompute runs on the GPU engine only; the CPU engine refuses it (the CPU MoE layer's aux-loss
  // gradient and LoRA dropout are not set up for a second forward pass), so this is never called there.
  StepContext recomputing() const { return StepContext{layout}; }

  // The gradient for the MoE sublayer the backward walk is at (it walks in reverse, so the last one left);
  // undefined without the aux loss.
  Tensor take_drouter_logits() {
    if (drouter_logits.empty()) return {};
    Tensor last = drouter_logits.back();
    drouter_logits.pop_back();
    return last;
  }
};

}  // namespace moetune::model
