// The batches of transformers' parity dumps (tests/reference/make_parity.py): "plain", "padded" and "packed",
// as the CPU and GPU parity tests feed them to the engine.
#pragma once

#include <string>

#include "moetune/io/safetensors.h"
#include "moetune/model/causal_lm.h"

namespace moetune::testing {

inline model::Batch parity_batch(const io::SafetensorsFile& reference, const std::string& name) {
  model::Batch b;
  b.input_ids = reference.tensor(name + ".input_ids");
  b.labels = reference.tensor(name + ".labels");
  if (reference.contains(name + ".attention_mask")) b.attention_mask = reference.tensor(name + ".attention_mask");
  if (reference.contains(name + ".position_ids")) b.position_ids = reference.tensor(name + ".position_ids");
  b.output_router_logits = true;
  return b;
}

// The reference dumps transformers' in-memory names: Nemotron-H's backbone.* is model.* there.
inline std::string in_memory_name(const std::string& hf_name) {
  return hf_name.starts_with("backbone.") ? "model." + hf_name.substr(9) : hf_name;
}

}  // namespace moetune::testing
