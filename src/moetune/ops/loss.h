// Causal-LM cross-entropy as transformers computes it (ForCausalLMLoss): logits in fp32, labels shifted by
// one (logit t is scored against label t+1, the last position ignored), ignore index -100, reduced as a mean
// over the counted tokens or as a sum divided by a given count (num_items_in_batch under accumulation).
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

inline constexpr int64_t kIgnoreIndex = -100;

// labels [B, S] -> targets [B * S]: targets[b, t] = labels[b, t + 1], and -100 at each row's last position.
std::vector<int64_t> shift_labels(const Tensor& labels);

struct CrossEntropy {
  double loss_sum = 0;  // Σ over counted rows of -log softmax(logits)[target]
  int64_t count = 0;    // rows whose target is not -100
};

// logits [T, V]; targets [T] with -100 for rows that are not scored. A target outside [0, V) is an Error.
CrossEntropy cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets);

// d(scale · loss_sum)/d logits: scale · (softmax - onehot) on counted rows, zero on ignored ones.
Tensor cross_entropy_backward(const Tensor& logits, const std::vector<int64_t>& targets, double scale);

}  // namespace moetune::ops
