// Text continuation for a quick look at what a model says: greedy or nucleus (top-p) sampling, on either engine
// (language_model.h). A KV cache keeps each layer's keys and values, so each new token runs the model on itself
// alone; the logits come to the host, where one sampler serves both devices.
#pragma once

#include <cstdint>
#include <vector>

#include "moetune/model/language_model.h"

namespace moetune::model {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // sample from the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
  bool kv_cache = true;           // false: each token re-runs the whole sequence (the reference the cache is tested by)
};

// Where a generation's time went: the prompt's pass (which gives the first new token) and the passes after it.
struct GenerateTiming {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double decode_tokens_per_second() const { return new_tokens > 1 ? double(new_tokens - 1) / decode_seconds : 0.0; }
};

// Whether a cached generation of `spec`'s model drops its cache of `cached` tokens before running on to a sequence of
// `length` (ModelSpec::generation_cache_reset_length: Phi-3's switch to longrope's long factors), and runs the whole
// sequence again.
bool generation_resets_cache(const ModelSpec& spec, int64_t length, int64_t cached);

// Returns the new tokens only; fills `timing` when given.
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              GenerateTiming* timing = nullptr);

}  // namespace moetune::model
