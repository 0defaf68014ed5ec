#include <cmath>
#include <numbers>

#include "moetune/ops/rope.h"

namespace moetune::ops {

std::vector<float> rope_inverse_frequencies(const RopeSpec& rope, int64_t head_dim) {
  const int64_t rotary_dim = int64_t(double(head_dim) * rope.partial_rotary_factor);
  MOETUNE_CHECK(rotary_dim == head_dim, "RoPE with partial_rotary_factor {} is not supported", rope.partial_rotary_factor);
  std::vector<float> inv(size_t(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = 1.0f / std::pow(float(rope.theta), float(2 * i) / float(head_dim));
  if (rope.type == "default") return inv;
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
  fail("rope_type '{}' is not supported yet (supported: default, linear, llama3)", rope.type);
}

void apply_rope(Tensor& x, const std::vector<float>& inv, const std::vector<int64_t>& positions, bool inverse) {
  const int64_t tokens = x.size(0), heads = x.size(1), head_dim = x.size(2), half = head_dim / 2;
  MOETUNE_CHECK(int64_t(positions.size()) == tokens && int64_t(inv.size()) == half, "apply_rope: x {} with {} positions",
                x.str(), positions.size());
  float* data = x.data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[size_t(t)]) * inv[size_t(i)];
      const float c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
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
