#include "moetune/model/model_spec.h"

#include <cmath>

#include "moetune/core/error.h"

namespace moetune::model {

bool RouterSpec::is_softmax_then_grouped_topk() const {
  return score == RouterScore::Softmax && !topk_before_softmax && (!correction_bias || num_groups == 1) && !bias;
}

bool RouterSpec::is_topk_then_softmax() const {
  return score == RouterScore::Softmax && topk_before_softmax && num_groups == 1 && !correction_bias && !renormalize &&
         scaling_factor == 1.0;
}

double AttentionSpec::softmax_scale() const {
  if (scaling) return *scaling;
  return 1.0 / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : double(qk_head_dim));
}

const MoeSpec* LayerSpec::moe() const {
  for (const SublayerSpec& sublayer : sublayers)
    if (const MoeSpec* moe = sublayer.moe()) return moe;
  return nullptr;
}

int64_t ModelSpec::moe_layer_count() const {
  int64_t count = 0;
  for (const LayerSpec& layer : layers) count += layer.moe() != nullptr;
  return count;
}

int64_t ModelSpec::num_experts() const {
  for (const LayerSpec& layer : layers)
    if (const MoeSpec* moe = layer.moe()) return moe->router.num_experts;
  return 0;
}

const AttentionSpec& ModelSpec::first_attention() const {
  for (const LayerSpec& layer : layers)
    for (const SublayerSpec& sublayer : layer.sublayers)
      if (const AttentionSpec* attention = sublayer.attention()) return *attention;
  fail("{} has no attention layer", architecture);
}

}  // namespace moetune::model
