// When, in the backward pass, a parameter's gradient is final: the decoder walk reports each layer as done
// (model/decoder_walk.h's LayerGradientsDone), and what reacts to it (ZeRO's reductions, the update during the
// backward pass) needs each parameter's layer in that order.
#pragma once

#include <cstdint>
#include <string>

namespace moetune::model {

// N for "layers.N.*", -1 for the embedding (its gradient is complete only after the whole backward pass, and
// also takes the tied LM head's), num_layers for the rest (final norm, LM head: done first).
int64_t gradient_ready_layer(const std::string& parameter_name, int64_t num_layers);

}  // namespace moetune::model
