// Rotary position embeddings, rotate-half style (the first and second halves of head_dim form the pairs),
// with the frequency schedules transformers implements for these families: default, dynamic (below
// max_position_embeddings, where it is default RoPE), linear, llama3, yarn, longrope (its short factors below
// original_max_position_embeddings, its long ones from there: rope_runs_long_factors).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

// The RoPE frequency schedule as config.json's rope_parameters (v5) or rope_theta + rope_scaling (v4) give it.
struct RopeSpec {
  std::string type = "default";  // default, dynamic, linear, llama3, yarn, longrope; "none": no RoPE (Nemotron-H)
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
  // yarn (transformers' _compute_yarn_parameters): the ramp between extrapolated and interpolated frequencies
  // spans the dimensions that rotate beta_fast .. beta_slow times over the original context; `truncate` rounds
  // its ends outwards (transformers' default when the key is absent is true; gpt-oss sets false).
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // yarn: cos and sin are multiplied by this; nullopt derives it from factor (and mscale / mscale_all_dim when
  // both are set, as DeepSeek's configs do; 0 means absent).
  std::optional<double> attention_factor;
  double mscale = 0, mscale_all_dim = 0;
  // longrope (transformers' _compute_longrope_parameters): each frequency divided by its short factor while every
  // position is below original_max_position_embeddings, by its long factor once one is not
  // (rope_runs_long_factors); cos and sin scaled by attention_factor, or by √(1 + ln(factor) / ln(original)) when
  // factor > 1, under either.
  std::vector<double> short_factor, long_factor;
};

// How many of head_dim's dimensions rotate under partial_rotary_factor, as transformers rotates them: int(head_dim ·
// factor) rounded up to even.
int64_t rope_rotary_dim(const RopeSpec& rope, int64_t head_dim);

// The inverse frequencies [head_dim / 2], as transformers computes them (fp32). With partial rotation, the
// rotating dimensions' schedule (rotary_dim / 2 values) followed by zeros: the engine keeps partially rotated
// heads in the order that makes rotate-half pairs (i, i + head_dim / 2) of them (model/parameter_layout.h).
// `long_factors`: longrope's long factors instead of its short ones (ignored by the other schedules).
std::vector<float> rope_inverse_frequencies(const RopeSpec& rope, int64_t head_dim, bool long_factors = false);

// transformers' longrope_frequency_update: a forward pass whose largest position + 1 exceeds
// original_max_position_embeddings runs longrope's long factors at every position, one below it the short ones
// (packed documents restart their positions; cached generation decides on each call's new positions, so a prompt
// inside the original context keeps the keys its short factors made, as transformers' cache does, except where
// Phi-3's generate drops its cache there: model/generate.h). False for the other schedules.
bool rope_runs_long_factors(const RopeSpec& rope, const std::vector<int64_t>& positions);

// What a block makes of the inverse frequencies (host vectors, device tensors), under longrope's short and long
// factors both: made once, picked per batch by rope_runs_long_factors. Other schedules hold one.
template <class Frequencies>
class RopeFactorSets {
 public:
  RopeFactorSets() = default;
  // make(long_factors) makes one set.
  template <class Make>
  RopeFactorSets(const RopeSpec& rope, Make make)
      : rope_(rope), short_(make(false)), long_(rope.type == "longrope" ? make(true) : Frequencies()) {}
  const Frequencies& for_positions(const std::vector<int64_t>& positions) const {
    return rope_runs_long_factors(rope_, positions) ? long_ : short_;
  }

 private:
  RopeSpec rope_;
  Frequencies short_, long_;
};

// The factor transformers multiplies cos and sin by (yarn's and longrope's attention scaling; 1 for the others).
double rope_attention_scaling(const RopeSpec& rope);

// transformers' get_mscale / yarn_get_mscale: 0.1 · mscale · ln(scale) + 1 for scale > 1, else 1 (the attention
// scaling YaRN suggests for a context stretched `scale` times; DeepSeek-V3 also scales its softmax by it).
double yarn_mscale(double scale, double mscale = 1.0);

// Rotates x [T, heads, head_dim] in place and multiplies its rotating pairs by `scaling` (rope_attention_scaling; the
// zero-frequency pairs of a partially rotated head pass as they are, as in transformers); positions[t] is
// token t's position in its document. The rotation is orthogonal, so the backward pass is the same call with
// `inverse` (rotating the gradient back, and scaling it by the same factor).
void apply_rope(Tensor& x, const std::vector<float>& inverse_frequencies, const std::vector<int64_t>& positions,
                bool inverse = false, double scaling = 1.0);

}  // namespace moetune::ops
