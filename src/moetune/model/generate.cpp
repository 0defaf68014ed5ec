#include "moetune/model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace moetune::model {
namespace {

int64_t sample(const float* logits, int64_t vocab, const GenerateOptions& options, std::mt19937_64& rng) {
  if (options.temperature <= 0) return int64_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<double> probs(static_cast<size_t>(vocab));
  const float max_logit = *std::max_element(logits, logits + vocab);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += (probs[size_t(i)] = std::exp((logits[i] - max_logit) / options.temperature));
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
  // The nucleus: most probable tokens until their share reaches top_p (always at least one).
  double kept = 0;
  size_t nucleus = 0;
  while (nucleus < order.size() && (nucleus == 0 || kept < options.top_p * total)) kept += probs[size_t(order[nucleus++])];
  double draw = std::uniform_real_distribution<double>(0.0, kept)(rng);
  for (size_t i = 0; i < nucleus; ++i)
    if ((draw -= probs[size_t(order[i])]) <= 0) return order[i];
  return order[nucleus - 1];
}

}  // namespace

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  MOETUNE_CHECK(!prompt.empty(), "generate: the prompt is empty");
  MOETUNE_CHECK(options.top_p > 0 && options.top_p <= 1, "generate: top_p must be in (0, 1], got {}", options.top_p);
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> sequence = prompt, produced;
  const int64_t vocab = model.spec().vocab_size;
  KvCache cache;
  // The logits [V] of the token after `sequence`; with the cache the model runs on the tokens it has not seen.
  auto next_logits = [&] {
    if (options.kv_cache)
      return model.next_token_logits(std::vector<int64_t>(sequence.begin() + cache.tokens(), sequence.end()), cache);
    const int64_t length = int64_t(sequence.size());
    return model.forward(Tensor::from_vector(sequence, {1, length})).view({length, vocab}).narrow(length - 1, 1).view({-1});
  };
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    const int64_t next = sample(next_logits().data<float>(), vocab, options, rng);
    sequence.push_back(next);
    produced.push_back(next);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
  }
  return produced;
}

}  // namespace moetune::model
