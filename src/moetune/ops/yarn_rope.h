// YaRN RoPE scaling (rope_type "yarn") as transformers 5.17's _compute_yarn_parameters computes it, plus the
// softmax-scale correction DeepSeek-V3's attention applies (yarn_apply_mscale). Kept apart from ops/rope.h:
// only the DeepSeek-V3 family reads it so far (GPT-OSS brings its own; the two are meant to merge).
#pragma once

#include <optional>
#include <vector>

#include "moetune/io/config_reader.h"

namespace moetune::ops {

struct YarnParameters {
  double theta = 10000.0;
  double factor = 1.0;
  std::optional<double> attention_factor;             // explicit; else derived from factor, mscale, mscale_all_dim
  std::optional<double> mscale, mscale_all_dim;
  double beta_fast = 32.0, beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
  bool truncate = true;
};

// Reads a rope_parameters / rope_scaling dict whose rope_type is "yarn". `max_position_embeddings` fills a
// missing factor (max / original), as transformers does for DeepSeek-style configs.
YarnParameters read_yarn_parameters(const io::ConfigReader& dict, double theta, int64_t max_position_embeddings);

// The inverse frequencies [dim / 2] in fp32, blending interpolation (÷ factor) and extrapolation along the
// beta_fast..beta_slow ramp.
std::vector<float> yarn_inverse_frequencies(const YarnParameters& yarn, int64_t dim);

// What transformers multiplies cos and sin by.
double yarn_attention_factor(const YarnParameters& yarn);

// 0.1 · mscale · ln(scale) + 1 for scale > 1, else 1 (yarn_get_mscale).
double yarn_mscale(double scale, double mscale);

}  // namespace moetune::ops
