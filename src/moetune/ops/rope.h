// Rotary position embeddings, rotate-half style (the first and second halves of head_dim form the pairs),
// with the frequency schedules transformers implements for these families: default, linear, llama3.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include <string>

namespace moetune::ops {

// The RoPE frequency schedule as config.json's rope_parameters (v5) or rope_theta + rope_scaling (v4) give it.
struct RopeSpec {
  std::string type = "default";  // default, linear, llama3 (others are refused by the families)
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
};

// The inverse frequencies [head_dim / 2], as transformers computes them (fp32).
std::vector<float> rope_inverse_frequencies(const RopeSpec& rope, int64_t head_dim);

// Rotates x [T, heads, head_dim] in place; positions[t] is token t's position in its document. The rotation
// is orthogonal, so the backward pass is the same call with `inverse` (rotating the gradient back).
void apply_rope(Tensor& x, const std::vector<float>& inverse_frequencies, const std::vector<int64_t>& positions,
                bool inverse = false);

}  // namespace moetune::ops
