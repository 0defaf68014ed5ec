// What a generation keeps between its steps so that each new token runs the model on itself alone: the keys and
// values of the tokens seen so far, per attention sublayer. Each device's model makes its own kind
// (LanguageModel::new_decode_cache): the CPU's grows fp32 tensors (model/kv_cache.h), the GPU's is a bf16 buffer
// per sublayer allocated once for the whole generation (model/cuda/kv_cache.h).
#pragma once

#include <cstdint>

namespace moetune::model {

class DecodeCache {
 public:
  virtual ~DecodeCache() = default;
  virtual int64_t tokens() const = 0;  // of the sequence so far
};

}  // namespace moetune::model
