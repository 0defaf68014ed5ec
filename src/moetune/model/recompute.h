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

}  // namespace moetune::model
