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

// Whether the GPU blocks keep their RMSNorms' outputs for the backward pass instead of running each norm again
// there: with nothing recomputed and no LoRA adapters (full fine-tuning, where the weights and optimizer state
// dominate the memory: T·width·2 bytes a norm buy back a ~20 us norm pass at T = 8192, width 2048). Where memory
// is the constraint (recomputation, LoRA's small-memory runs) the norms are recomputed.
bool keeps_norm_outputs(Recompute mode, bool lora);

}  // namespace moetune::model
