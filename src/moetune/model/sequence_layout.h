// What every layer needs to know about the batch besides the activations: positions for RoPE, which keys a
// query may see (document boundaries, padding), and which tokens count for the aux loss.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/model_spec.h"
#include "moetune/ops/attention.h"

namespace moetune::model {

struct SequenceLayout {
  std::vector<int64_t> positions;           // per token, restarting at each document
  ops::AttentionMask mask;
  std::vector<uint8_t> token_valid;         // per token, 0 for padding; empty when there is none
};

// input_ids [B, S]; position_ids [B, S] or undefined (0..S-1 per row); attention_mask [B, S] or undefined.
// A new document starts at each row and wherever a position does not follow its predecessor by one.
SequenceLayout sequence_layout(const Tensor& input_ids, const Tensor& position_ids,
                               const Tensor& attention_mask);

// transformers' dynamic RoPE is default RoPE until a position reaches max_position_embeddings; there it rescales
// its base, and keeps the new base for later calls, which a step of its own cannot follow: such positions are
// refused, naming the key. Other schedules take any position (longrope's switch to its long factors depends on the
// batch alone: ops::rope_runs_long_factors).
void require_rope_positions(const ModelSpec& spec, const SequenceLayout& layout);

}  // namespace moetune::model
