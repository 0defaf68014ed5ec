#include "moetune/model/generate.h"

#include <algorithm>
#include <chrono>
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

bool generation_resets_cache(const ModelSpec& spec, int64_t length, int64_t cached) {
  const int64_t reset = spec.generation_cache_reset_length;
  return reset > 0 && cached > 0 && length > reset && cached <= reset;
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              GenerateTiming* timing) {
  MOETUNE_CHECK(!prompt.empty(), "generate: the prompt is empty");
  MOETUNE_CHECK(options.top_p > 0 && options.top_p <= 1, "generate: top_p must be in (0, 1], got {}", options.top_p);
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> sequence = prompt, produced;
  const int64_t vocab = model.spec().vocab_size;
  std::unique_ptr<DecodeCache> cache;
  const int64_t capacity = int64_t(prompt.size()) + std::max<int64_t>(options.max_new_tokens, 1);
  if (options.kv_cache) cache = model.new_decode_cache(capacity);
  // The logits [V] of the token after `sequence`; with the cache the model runs on the tokens it has not seen.
  auto next_logits = [&] {
    if (cache && generation_resets_cache(model.spec(), int64_t(sequence.size()), cache->tokens()))
      cache = model.new_decode_cache(capacity);
    if (cache)
      return model.next_token_logits(std::vector<int64_t>(sequence.begin() + cache->tokens(), sequence.end()), *cache);
    const int64_t length = int64_t(sequence.size());
    return model.logits({.input_ids = Tensor::from_vector(sequence, {1, length})}).view({length, vocab}).narrow(length - 1, 1).view({-1});
  };
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_token = start;
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    const int64_t next = sample(next_logits().data<float>(), vocab, options, rng);  // the logits are on the host
    if (n == 0) first_token = Clock::now();
    sequence.push_back(next);
    produced.push_back(next);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
  }
  if (timing) {
    const Clock::time_point end = Clock::now();
    *timing = {.prompt_tokens = int64_t(prompt.size()),
               .new_tokens = int64_t(produced.size()),
               .prefill_seconds = std::chrono::duration<double>(first_token - start).count(),
               .decode_seconds = std::chrono::duration<double>(end - first_token).count()};
  }
  return produced;
}

}  // namespace moetune::model
