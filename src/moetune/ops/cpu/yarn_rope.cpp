#include <algorithm>
#include <cmath>
#include <numbers>

#include "moetune/core/error.h"
#include "moetune/ops/yarn_rope.h"

namespace moetune::ops {

YarnParameters read_yarn_parameters(const io::ConfigReader& r, double theta, int64_t max_position_embeddings) {
  YarnParameters y;
  y.theta = theta;
  y.original_max_position_embeddings = r.integer("original_max_position_embeddings", 0);
  if (y.original_max_position_embeddings <= 0)
    fail("YaRN RoPE needs a positive 'original_max_position_embeddings' in the RoPE parameters");
  y.factor = r.number("factor", double(max_position_embeddings) / double(y.original_max_position_embeddings));
  if (!(y.factor > 0)) fail("YaRN RoPE 'factor' must be positive, got {}", y.factor);
  if (r.has("attention_factor")) y.attention_factor = r.number("attention_factor", 1.0);
  if (r.has("mscale")) y.mscale = r.number("mscale", 0.0);
  if (r.has("mscale_all_dim")) y.mscale_all_dim = r.number("mscale_all_dim", 0.0);
  // transformers: `get("beta_fast") or 32`, so 0 means the default too.
  y.beta_fast = r.number("beta_fast", 0.0) != 0.0 ? r.number("beta_fast", 0.0) : 32.0;
  y.beta_slow = r.number("beta_slow", 0.0) != 0.0 ? r.number("beta_slow", 0.0) : 1.0;
  y.truncate = r.boolean("truncate", true);
  return y;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double yarn_attention_factor(const YarnParameters& y) {
  if (y.attention_factor) return *y.attention_factor;
  // Python truthiness: a zero mscale counts as absent.
  if (y.mscale.value_or(0.0) != 0.0 && y.mscale_all_dim.value_or(0.0) != 0.0)
    return yarn_mscale(y.factor, *y.mscale) / yarn_mscale(y.factor, *y.mscale_all_dim);
  return yarn_mscale(y.factor, 1.0);
}

std::vector<float> yarn_inverse_frequencies(const YarnParameters& y, int64_t dim) {
  // The dimension index at which a wavelength makes `rotations` turns over the original context (in double,
  // as transformers computes it in Python).
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(double(y.original_max_position_embeddings) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(y.theta));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  std::vector<float> inv(size_t(dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    const float pos_freq = std::pow(float(y.theta), float(2 * i) / float(dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (float(y.factor) * pos_freq);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of extrapolation (short wavelengths keep their frequency)
    inv[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return inv;
}

}  // namespace moetune::ops
