#include "moetune/model/model_flops.h"

#include <algorithm>

namespace moetune::model {

double training_flops_per_token(const ParameterLayout& layout, int64_t sequence) {
  double attention = 0;
  for (const LayerSpec& layer : layout.spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers)
      if (const AttentionSpec* a = sublayer.attention()) {
        const int64_t seen = a->sliding_window ? std::min(sequence, *a->sliding_window) : sequence;
        // q·kᵀ over qk_head_dim and p·v over v_head_dim (MLA's differ): 2 FLOPs a product, 3 passes, half causal.
        attention += 3.0 * double(a->num_heads) * double(a->qk_head_dim + a->v_head_dim) * double(seen);
      } else if (const GatedDeltaSpec* g = sublayer.gated_delta()) {
        // The recurrence per token and value head: the state's decay, its read by k, its update and its read by q
        // (~4 products of Dk·Dv, 2 FLOPs each), 3 passes.
        attention += 3.0 * 8.0 * double(g->num_v_heads) * double(g->k_head_dim) * double(g->v_head_dim);
      }
  return 6.0 * double(layout.active_matmul_parameters()) + attention;
}

}  // namespace moetune::model
