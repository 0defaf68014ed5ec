#include <cmath>

#include "moetune/ops/mla_rope.h"

namespace moetune::ops {
namespace {

// Pair i's two input slots: (2i, 2i+1) interleaved, (i, i + half) rotate-half style. The output slots are
// always (i, i + half).
struct PairSlots {
  int64_t first, second;
};
PairSlots input_slots(int64_t i, int64_t half, bool interleaved) {
  return interleaved ? PairSlots{2 * i, 2 * i + 1} : PairSlots{i, i + half};
}

template <typename Rotate>
Tensor rotate_each_pair(const Tensor& x, const MlaRope& rope, const std::vector<int64_t>& positions, Rotate rotate) {
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  MOETUNE_CHECK(x.dim() == 3 && int64_t(positions.size()) == tokens && int64_t(rope.inverse_frequencies.size()) == half,
                "mla_rope: x {} with {} positions and {} frequencies", x.str(), positions.size(),
                rope.inverse_frequencies.size());
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < half; ++i) {
      // As transformers: the angle in fp32, then cos and sin times the attention factor, in fp32.
      const float angle = float(positions[size_t(t)]) * rope.inverse_frequencies[size_t(i)];
      const float c = std::cos(angle) * rope.scale, s = std::sin(angle) * rope.scale;
      const PairSlots slots = input_slots(i, half, rope.interleaved);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = (t * heads + h) * dim;
        rotate(in + row, o + row, slots, i, half, c, s);
      }
    }
  return out;
}

}  // namespace

Tensor mla_rope_forward(const Tensor& x, const MlaRope& rope, const std::vector<int64_t>& positions) {
  return rotate_each_pair(x, rope, positions, [](const float* in, float* out, PairSlots p, int64_t i, int64_t half, float c, float s) {
    const float a = in[p.first], b = in[p.second];
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  });
}

Tensor mla_rope_backward(const Tensor& dout, const MlaRope& rope, const std::vector<int64_t>& positions) {
  return rotate_each_pair(dout, rope, positions, [](const float* dy, float* dx, PairSlots p, int64_t i, int64_t half, float c, float s) {
    const float da = dy[i], db = dy[i + half];
    dx[p.first] = da * c + db * s;
    dx[p.second] = db * c - da * s;
  });
}

}  // namespace moetune::ops
