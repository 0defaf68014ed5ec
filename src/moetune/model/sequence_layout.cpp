#include "moetune/model/sequence_layout.h"

#include <algorithm>

#include "moetune/core/error.h"

namespace moetune::model {

SequenceLayout sequence_layout(const Tensor& input_ids, const Tensor& position_ids,
                               const Tensor& attention_mask) {
  const int64_t seq = input_ids.size(1), tokens = input_ids.numel();
  for (const Tensor* t : {&position_ids, &attention_mask})
    MOETUNE_CHECK(!t->defined() || (t->shape() == input_ids.shape() && t->dtype() == DType::I64),
                  "position_ids / attention_mask must be I64 of the input_ids' shape {}, got {}",
                  shape_str(input_ids.shape()), t->str());
  SequenceLayout layout;
  layout.positions.resize(size_t(tokens));
  layout.mask.document_start.resize(size_t(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    layout.positions[size_t(t)] = position_ids.defined() ? position_ids.data<int64_t>()[t] : t % seq;
    const bool starts = t % seq == 0 || layout.positions[size_t(t)] != layout.positions[size_t(t - 1)] + 1;
    layout.mask.document_start[size_t(t)] = starts ? t : layout.mask.document_start[size_t(t - 1)];
  }
  if (attention_mask.defined()) {
    for (int64_t t = 0; t < tokens; ++t) layout.token_valid.push_back(attention_mask.data<int64_t>()[t] != 0);
    layout.mask.key_valid = layout.token_valid;
  }
  return layout;
}

void require_rope_positions(const ModelSpec& spec, const SequenceLayout& layout) {
  bool dynamic = false;
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers)
      if (const AttentionSpec* a = sublayer.attention(); a && a->rope.type == "dynamic") dynamic = true;
  if (!dynamic || layout.positions.empty()) return;
  const int64_t last = *std::max_element(layout.positions.begin(), layout.positions.end());
  if (last >= spec.max_position_embeddings)
    fail("position {} reaches 'max_position_embeddings' ({}), where the config's dynamic RoPE (rope_type dynamic) "
         "rescales its frequencies, which moetune does not implement: use sequences of at most {} tokens",
         last, spec.max_position_embeddings, spec.max_position_embeddings);
}

}  // namespace moetune::model
