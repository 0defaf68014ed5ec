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
      }
  return 6.0 * double(layout.active_matmul_parameters()) + attention;
}

}  // namespace moetune::model
