// What a GPU block needs about the step besides its input (model/step_context.h is the CPU's): the uploaded
// batch (positions, documents, padding) and the load-balancing loss's running sums over the MoE layers, which
// every MoE layer adds to in the forward pass and reads back in its backward pass.
#pragma once

#include "moetune/model/cuda/device_batch.h"

namespace moetune::model::cuda {

class ExpertNormPartials;
class KvCache;

// The load-balancing loss's running sums over the MoE layers of one forward pass (device F32 [E] each).
struct AuxLossSums {
  Tensor counts, prob_sums;
};

// What LoRA's dropout needs to know of a forward pass: whether it applies (training steps only, as in PEFT's train
// mode), and with which masks.
struct LoraPass {
  bool training = false;
  uint64_t draw = 0;  // which masks (ops/lora_dropout.h): a recomputed forward has its first pass's
};

struct StepContext {
  const DeviceBatch& batch;
  AuxLossSums aux;         // undefined without the aux loss
  double aux_rows = 0;     // rows counted over all MoE layers
  double aux_scale = 0;    // d(loss)/d(aux loss), set before the backward walk; 0 without the aux loss

  KvCache* kv_cache = nullptr;  // generation: attention reads and extends the sequence's keys and values
  bool training = false;        // a training step (forward_backward): LoRA dropout applies
  // The step's first backward pass (no gradient holds anything of this step yet): the gradients a block lists as
  // overwritten (MoeBlock::overwritten_gradients) it must write whole, not add to; CausalLM::zero_grad() does not
  // zero them, and writing saves reading them (the experts' weight gradients: 1.2 GB per Qwen3-30B-A3B layer).
  // Every other gradient holds zeros then.
  bool overwrite_gradients = false;
  // Or null: where a MoE block that overwrites its expert weights' gradients has their grouped GEMM sum their
  // squares for the clipping norm (model/cuda/expert_norm_partials.h).
  ExpertNormPartials* expert_norms = nullptr;
  uint64_t lora_draw = 0;       // with these masks, the same in a recomputed forward
  // The blocks keep their norms' outputs and their activations for the backward pass (model/recompute.h
  // keeps_outputs); else their backward passes compute them again.
  bool keep_outputs = false;

  // For a sublayer's forward run again in the backward pass (training.recompute): the same batch, and no aux
  // sums, so that the MoE layer does not count its routing twice.
  StepContext recomputing() const {
    StepContext again{batch};
    again.training = training;
    again.lora_draw = lora_draw;
    again.keep_outputs = keep_outputs;
    return again;
  }
  LoraPass lora_pass() const { return {training, lora_draw}; }
};

}  // namespace moetune::model::cuda
