#include <algorithm>

#include "moetune/ops/embedding.h"

namespace moetune::ops {

Tensor embedding_forward(const Tensor& ids, const Tensor& table, float scale) {
  const int64_t count = ids.numel(), vocab = table.size(0), hidden = table.size(1);
  Tensor out = Tensor::empty({count, hidden}, DType::F32);
  for (int64_t t = 0; t < count; ++t) {
    const int64_t id = ids.data<int64_t>()[t];
    MOETUNE_CHECK(id >= 0 && id < vocab, "token id {} at position {} is outside the vocabulary of {}", id, t, vocab);
    const float* row = table.data<float>() + id * hidden;
    std::transform(row, row + hidden, out.data<float>() + t * hidden, [scale](float v) { return v * scale; });
  }
  return out;
}

void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_row, float scale) {
  if (!dtable.defined()) return;  // a frozen table
  const int64_t hidden = dtable.size(1);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    if (ids.data<int64_t>()[t] == padding_row) continue;
    float* row = dtable.data<float>() + ids.data<int64_t>()[t] * hidden;
    const float* d = dout.data<float>() + t * hidden;
    for (int64_t i = 0; i < hidden; ++i) row[i] += scale * d[i];
  }
}

}  // namespace moetune::ops
