// Text continuation for a quick look at what a model says: greedy or nucleus (top-p) sampling, on the CPU engine.
// A KV cache keeps each layer's keys and values, so each new token runs the model on itself alone.
#pragma once

#include <cstdint>
#include <vector>

#include "moetune/model/causal_lm.h"

namespace moetune::model {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // sample from the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
  bool kv_cache = true;           // false: each token re-runs the whole sequence (the reference the cache is tested by)
};

// Returns the new tokens only.
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerateOptions& options);

}  // namespace moetune::model
