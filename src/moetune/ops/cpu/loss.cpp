#include <algorithm>
#include <cmath>
#include <vector>

#include "moetune/ops/loss.h"

namespace moetune::ops {
namespace {

// log Σ exp(row) with the max subtracted first, in double so long vocabularies lose nothing.
double log_sum_exp(const float* row, int64_t width) {
  const float max_value = *std::max_element(row, row + width);
  double total = 0;
  for (int64_t i = 0; i < width; ++i) total += std::exp(double(row[i] - max_value));
  return double(max_value) + std::log(total);
}

void check_targets(const Tensor& logits, const std::vector<int64_t>& targets) {
  MOETUNE_CHECK(logits.dim() == 2 && int64_t(targets.size()) == logits.size(0),
                "cross_entropy: logits {} with {} targets", logits.str(), targets.size());
  for (size_t t = 0; t < targets.size(); ++t)
    MOETUNE_CHECK(targets[t] == kIgnoreIndex || (targets[t] >= 0 && targets[t] < logits.size(1)),
                  "cross_entropy: target {} at row {} is outside the vocabulary of {}", targets[t], t, logits.size(1));
}

}  // namespace

std::vector<int64_t> shift_labels(const Tensor& labels) {
  MOETUNE_CHECK(labels.dim() == 2 && labels.dtype() == DType::I64, "shift_labels: labels must be I64 [B, S], got {}",
                labels.str());
  const int64_t rows = labels.size(0), seq = labels.size(1);
  std::vector<int64_t> targets(static_cast<size_t>(rows * seq), kIgnoreIndex);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t + 1 < seq; ++t) targets[size_t(r * seq + t)] = labels.data<int64_t>()[r * seq + t + 1];
  return targets;
}

CrossEntropy cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets) {
  check_targets(logits, targets);
  const int64_t vocab = logits.size(1);
  // Per-row terms in parallel, then one sum in row order: an OpenMP reduction adds the threads' partial sums in
  // the order they finish, so with more than two threads the loss would change in its last bits from run to run.
  std::vector<double> row_loss(targets.size(), 0.0);
#pragma omp parallel for
  for (int64_t t = 0; t < int64_t(targets.size()); ++t) {
    if (targets[size_t(t)] == kIgnoreIndex) continue;
    const float* row = logits.data<float>() + t * vocab;
    row_loss[size_t(t)] = log_sum_exp(row, vocab) - double(row[targets[size_t(t)]]);
  }
  double loss_sum = 0;
  int64_t count = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    if (targets[t] == kIgnoreIndex) continue;
    loss_sum += row_loss[t];
    ++count;
  }
  return {loss_sum, count};
}

Tensor cross_entropy_backward(const Tensor& logits, const std::vector<int64_t>& targets, double scale) {
  check_targets(logits, targets);
  const int64_t vocab = logits.size(1);
  Tensor grad = Tensor::zeros(logits.shape(), DType::F32);
#pragma omp parallel for
  for (int64_t t = 0; t < int64_t(targets.size()); ++t) {
    const int64_t target = targets[size_t(t)];
    if (target == kIgnoreIndex) continue;
    const float* row = logits.data<float>() + t * vocab;
    float* out = grad.data<float>() + t * vocab;
    const double lse = log_sum_exp(row, vocab);
    for (int64_t i = 0; i < vocab; ++i) out[i] = float(scale * std::exp(double(row[i]) - lse));
    out[target] -= float(scale);
  }
  return grad;
}

}  // namespace moetune::ops
