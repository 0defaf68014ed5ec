// Activation recomputation (training.recompute): which sublayers keep only their input from the forward pass and
// run their forward again, just before their backward pass, to rebuild what it reads. Trades one more forward of
// those sublayers for their stash: `experts` the feed-forward sublayers (MoE and dense MLP: the largest stash, the
// experts' permuted rows and pre-activations), `attention` the attention sublayers, `full` every sublayer.
#pragma once

#include <string>

#include "moetune/model/model_spec.h"

namespace moetune::model {

enum class Recompute { None, Experts, Attention, Full };

// "none", "experts", "attention", "full"; anything else fails naming `key` and the choices.
Recompute parse_recompute(const std::string& value, const std::string& key = "training.recompute");
const char* recompute_name(Recompute mode);
bool recomputes(Recompute mode, const SublayerSpec& sublayer);
// With training.recompute_keep_layers: the last `keep_last_layers` of the model's `num_layers` layers keep their
// stash even where `mode` recomputes (memory left after recomputing, spent on speed).
bool recomputes(Recompute mode, const SublayerSpec& sublayer, int64_t layer, int64_t num_layers, int64_t keep_last_layers);

// Whether the GPU blocks keep the outputs their backward pass would otherwise compute again, their RMSNorms'
// outputs and their MLPs' and experts' activations (what the down projection's weight gradient reads): with
// nothing recomputed and no LoRA adapters (full fine-tuning, where the weights and optimizer state dominate the
// memory: T·width·2 bytes a norm buy back a ~20 us norm pass at T = 8192, width 2048; an activation's
// rows·intermediate·2 bytes, the write of it that the activation's backward pass otherwise adds, ~1/6 of that
// pass). Where memory is the constraint (recomputation, LoRA's small-memory runs) both are recomputed.
bool keeps_outputs(Recompute mode, bool lora);
// Whether an MLP (dense, shared expert or routed experts) keeps its activation where the blocks keep their outputs:
// the gated ones (SwiGLU, GPT-OSS's clamped SwiGLU), whose backward pass would otherwise write it again; relu²'s
// recomputes it in a pass of its own, and keeps doing so.
inline bool keeps_activation(const MlpSpec& mlp, bool keep_outputs) {
  return keep_outputs && mlp.activation != Activation::ReluSquared;
}

}  // namespace moetune::model
