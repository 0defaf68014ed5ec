// RoPE as DeepSeek-V3's attention applies it to the rope part of q and k: optionally interleaved (the pairs are
// (x0, x1), (x2, x3), ... and the result is written de-interleaved, first every pair's first half then every
// second half, as transformers' apply_rotary_pos_emb_interleave does) and with cos and sin multiplied by
// `scale` (YaRN's attention factor). Out of place, unlike ops::apply_rope, because the interleaved layout
// changes where each value lands.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

struct MlaRope {
  std::vector<float> inverse_frequencies;  // [dim / 2]
  bool interleaved = false;
  float scale = 1.0f;
};

// x [T, heads, dim] -> rotated [T, heads, dim]; positions[t] is token t's position in its document.
Tensor mla_rope_forward(const Tensor& x, const MlaRope& rope, const std::vector<int64_t>& positions);

// d(x) from d(out): the transpose of the forward map (scale · the inverse rotation, re-interleaved).
Tensor mla_rope_backward(const Tensor& dout, const MlaRope& rope, const std::vector<int64_t>& positions);

}  // namespace moetune::ops
