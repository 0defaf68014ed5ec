// The batches of transformers' parity dumps (tests/reference/make_parity.py): "plain", "padded" and "packed",
// as the CPU and GPU parity tests feed them to the engine.
#pragma once

#include <string>

#include "moetune/io/safetensors.h"
#include "moetune/model/causal_lm.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/moe_variant.h"
#include "moetune/ops/cast.h"

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

// Whether the model has a router the CPU engine runs (cpu_runs_router): the GPU tests then force the GPU's choices
// on the CPU reference, so a bf16 near-tie flip cannot fail a comparison (tests/gpu/test_model_parity.cpp says why).
inline bool forces_routing(const model::ModelSpec& spec) {
  for (const model::LayerSpec& layer : spec.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers)
      if (const model::MoeSpec* moe = sublayer.moe(); moe && model::cpu_runs_router(moe->router)) return true;
  return false;
}

// The CPU reference model on a fixture's weights rounded to bf16 and widened back to fp32: the GPU engine's model.
inline model::CausalLM cpu_on_bf16_weights(const std::filesystem::path& folder) {
  model::ModelWeights weights = model::load_checkpoint(folder, model::LoadOptions{DType::BF16});
  for (Tensor& p : weights.parameters) p = ops::cast(p, DType::F32);
  return model::CausalLM::from_weights(std::move(weights));
}

}  // namespace moetune::testing
