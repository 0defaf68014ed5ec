// Rotary position embeddings, rotate-half style (the first and second halves of head_dim form the pairs),
// with the frequency schedules transformers implements for these families: default, linear, llama3.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/io/hf_config.h"

namespace moetune::ops {

// The inverse frequencies [head_dim / 2], as transformers computes them (fp32).
std::vector<float> rope_inverse_frequencies(const io::RopeConfig& rope, int64_t head_dim);

// Rotates x [T, heads, head_dim] in place; positions[t] is token t's position in its document. The rotation
// is orthogonal, so the backward pass is the same call with `inverse` (rotating the gradient back).
void apply_rope(Tensor& x, const std::vector<float>& inverse_frequencies, const std::vector<int64_t>& positions,
                bool inverse = false);

}  // namespace moetune::ops
