#include <algorithm>
#include <cmath>
#include <numbers>

#include "moetune/ops/rope.h"

namespace moetune::ops {

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

namespace {

// YaRN: frequencies that rotate fewer than beta_slow times over the original context are interpolated (divided by
// factor), those rotating more than beta_fast times kept, a linear ramp over the dimensions between. Python
// scalars are doubles in transformers and the tensors fp32, so each step rounds where it does there.
std::vector<float> yarn_inverse_frequencies(const RopeSpec& rope, int64_t head_dim) {
  const double dim = double(head_dim), base = rope.theta, context = double(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const float ramp_start = float(low), ramp_width = float(high - low), factor = float(rope.factor);
  std::vector<float> inv(size_t(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    const float theta_power = std::pow(float(base), float(2 * i) / float(head_dim));
    const float extrapolated = 1.0f / theta_power, interpolated = 1.0f / (factor * theta_power);
    const float ramp = std::clamp((float(i) - ramp_start) / ramp_width, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the extrapolated (unscaled) frequency
    inv[i] = interpolated * (1.0f - keep) + extrapolated * keep;
  }
  return inv;
}

}  // namespace

double rope_attention_scaling(const RopeSpec& rope) {
  if (rope.type == "longrope") {
    if (rope.attention_factor) return *rope.attention_factor;
    if (rope.factor <= 1.0) return 1.0;
    return std::sqrt(1.0 + std::log(rope.factor) / std::log(double(rope.original_max_position_embeddings)));
  }
  if (rope.type != "yarn") return 1.0;
  if (rope.attention_factor) return *rope.attention_factor;
  if (rope.mscale != 0 && rope.mscale_all_dim != 0)
    return yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
  return yarn_mscale(rope.factor);
}

int64_t rope_rotary_dim(const RopeSpec& rope, int64_t head_dim) {
  // transformers: dim = int(head_dim · factor) and inv_freq = theta^-(arange(0, dim, 2) / dim), whose
  // ceil(dim / 2) frequencies rotate twice as many dimensions (one more than dim when dim is odd).
  const int64_t dim = int64_t(double(head_dim) * rope.partial_rotary_factor), rotary_dim = 2 * ((dim + 1) / 2);
  MOETUNE_CHECK(dim > 0 && rotary_dim <= head_dim,
                "RoPE: partial_rotary_factor {} of head_dim {} rotates {} dimensions", rope.partial_rotary_factor,
                head_dim, rotary_dim);
  return rotary_dim;
}

bool rope_runs_long_factors(const RopeSpec& rope, const std::vector<int64_t>& positions) {
  return rope.type == "longrope" && !positions.empty() &&
         *std::max_element(positions.begin(), positions.end()) + 1 > rope.original_max_position_embeddings;
}

std::vector<float> rope_inverse_frequencies(const RopeSpec& rope, int64_t head_dim, bool long_factors) {
  if (rope.type == "none") return {};  // no positional embedding (Nemotron-H): apply_rope leaves x alone
  // transformers raises theta to arange(0, dim, 2) / dim over dim = int(head_dim · partial_rotary_factor), in fp32.
  // With partial rotation (the default and longrope schedules; the config readers refuse the others) the pairs past
  // those frequencies get zeros and pass unrotated (angle 0: cos 1 and sin 0 exactly, so those values come through
  // bit for bit, and apply_rope leaves them unscaled; the engine's head layout puts the rotating pairs first:
  // model/parameter_layout.h's PartialRotary).
  const int64_t rotary_dim = rope_rotary_dim(rope, head_dim);
  MOETUNE_CHECK(rotary_dim == head_dim || rope.type == "default" || rope.type == "longrope",
                "RoPE: partial rotation with rope_type {} is not supported", rope.type);
  const float dim = float(int64_t(double(head_dim) * rope.partial_rotary_factor));
  const auto theta_power = [&](size_t i) { return std::pow(float(rope.theta), float(2 * i) / dim); };
  const size_t rotating = size_t(rotary_dim / 2);
  std::vector<float> inv(size_t(head_dim / 2), 0.0f);
  for (size_t i = 0; i < rotating; ++i) inv[i] = 1.0f / theta_power(i);
  // dynamic: default RoPE below max_position_embeddings, the only positions the model takes (decoder_config.cpp)
  if (rope.type == "default" || rope.type == "dynamic") return inv;
  if (rope.type == "yarn") return yarn_inverse_frequencies(rope, head_dim);
  if (rope.type == "longrope") {
    const std::vector<double>& factors = long_factors ? rope.long_factor : rope.short_factor;
    MOETUNE_CHECK(factors.size() == rotating, "RoPE: longrope's {} has {} values for {} rotating frequencies",
                  long_factors ? "long_factor" : "short_factor", factors.size(), rotating);
    for (size_t i = 0; i < rotating; ++i)  // transformers: 1 / (ext_factors · base^(arange(0, dim, 2) / dim)) in fp32
      inv[i] = 1.0f / (float(factors[i]) * theta_power(i));
    return inv;
  }
  if (rope.type == "linear") {
    for (float& f : inv) f /= float(rope.factor);
    return inv;
  }
  if (rope.type == "llama3") {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated smoothly.
    const float old_context = float(rope.original_max_position_embeddings);
    const float low_wavelength = old_context / float(rope.low_freq_factor);
    const float high_wavelength = old_context / float(rope.high_freq_factor);
    const float factor = float(rope.factor);
    for (float& f : inv) {
      const float wavelength = 2.0f * std::numbers::pi_v<float> / f;
      const float scaled = wavelength > low_wavelength ? f / factor : f;
      if (wavelength < high_wavelength || wavelength > low_wavelength) {
        f = scaled;
        continue;
      }
      const float smooth = (old_context / wavelength - float(rope.low_freq_factor)) /
                           float(rope.high_freq_factor - rope.low_freq_factor);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    return inv;
  }
  fail("rope_type '{}' is not supported yet (supported: default, dynamic, linear, llama3, yarn, longrope)", rope.type);
}

void apply_rope(Tensor& x, const std::vector<float>& inv, const std::vector<int64_t>& positions, bool inverse,
                double scaling) {
  if (inv.empty()) return;  // RopeSpec type "none"
  const int64_t tokens = x.size(0), heads = x.size(1), head_dim = x.size(2), half = head_dim / 2;
  MOETUNE_CHECK(int64_t(positions.size()) == tokens && int64_t(inv.size()) == half, "apply_rope: x {} with {} positions",
                x.str(), positions.size());
  float* data = x.data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[size_t(t)]) * inv[size_t(i)];
      // As transformers does: cos and sin scaled (in fp32) before they meet x; the pairs a partially rotated head
      // passes unrotated (zero frequency) are transformers' concatenated pass-through, unscaled.
      const float pair_scaling = inv[size_t(i)] != 0.0f ? float(scaling) : 1.0f;
      const float c = std::cos(angle) * pair_scaling, sine = std::sin(angle) * pair_scaling;
      const float s = inverse ? -sine : sine;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = data + (t * heads + h) * head_dim;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace moetune::ops
