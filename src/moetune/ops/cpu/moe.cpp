#include <algorithm>
#include <cmath>
#include <numeric>

#include "moetune/ops/linear.h"
#include "moetune/ops/moe.h"

namespace moetune::ops {

Routing route_softmax_topk(const Tensor& x, const Tensor& router_weight, int64_t top_k, bool normalize) {
  Routing routing{linear(x, router_weight), {}, {}, top_k};
  const int64_t tokens = x.size(0), experts = router_weight.size(0);
  const float* logits = routing.logits.data<float>();
  std::vector<float> probs(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    const float max_logit = *std::max_element(row, row + experts);
    float total = 0.0f;
    for (int64_t e = 0; e < experts; ++e) total += (probs[size_t(e)] = std::exp(row[e] - max_logit));
    for (float& p : probs) p /= total;
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; ties to the lower index, as torch.topk does on the CPU.
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return probs[size_t(a)] != probs[size_t(b)] ? probs[size_t(a)] > probs[size_t(b)] : a < b;
    });
    float chosen = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) chosen += probs[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < top_k; ++j) {
      routing.expert.push_back(order[size_t(j)]);
      routing.weight.push_back(normalize ? probs[size_t(order[size_t(j)])] / chosen : probs[size_t(order[size_t(j)])]);
    }
  }
  return routing;
}

Tensor swiglu(const Tensor& gate_up) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor out = Tensor::empty({rows, inner}, DType::F32);
  const float* in = gate_up.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const float gate = in[r * 2 * inner + i], up = in[r * 2 * inner + inner + i];
      o[r * inner + i] = gate / (1.0f + std::exp(-gate)) * up;
    }
  return out;
}

Tensor moe_experts(const Tensor& x, const Routing& routing, const Tensor& gate_up, const Tensor& down) {
  const int64_t tokens = x.size(0), hidden = x.size(1), experts = gate_up.size(0);
  Tensor out = Tensor::zeros({tokens, hidden}, DType::F32);
  // Expert-major: gather each expert's tokens, run its two projections once, scatter back weighted.
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> weights;
    for (int64_t i = 0; i < int64_t(routing.expert.size()); ++i)
      if (routing.expert[size_t(i)] == e) {
        rows.push_back(i / routing.top_k);
        weights.push_back(routing.weight[size_t(i)]);
      }
    if (rows.empty()) continue;
    Tensor gathered = Tensor::empty({int64_t(rows.size()), hidden}, DType::F32);
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy_n(x.data<float>() + rows[r] * hidden, hidden, gathered.data<float>() + int64_t(r) * hidden);
    Tensor expert_out = linear(swiglu(linear(gathered, gate_up[e])), down[e]);
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t i = 0; i < hidden; ++i)
        out.data<float>()[rows[r] * hidden + i] += weights[r] * expert_out.data<float>()[int64_t(r) * hidden + i];
  }
  return out;
}

}  // namespace moetune::ops
