// A model family is an adapter between a Hugging Face architecture and the engine: it owns config.json's
// defaults exactly as transformers has them, the layer pattern, the HF tensor names and how they map onto the
// engine's fused layout. Adding a family is one file here plus a line in registry.cpp (docs/adding-a-family.md).
#pragma once

#include <vector>

#include "moetune/io/config_reader.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

struct Family {
  const char* architecture;  // config.json "architectures"[0], e.g. "Qwen3MoeForCausalLM"
  const char* model_type;    // config.json "model_type", e.g. "qwen3_moe"
  // config.json -> the description, with transformers' defaults; refuses (naming the key) whatever the engine
  // does not implement. architecture, family and json are filled in by the caller.
  ModelSpec (*describe)(const io::ConfigReader& config);
  // The engine's parameters, each with the HF tensors it is made of, in the order transformers lists them.
  std::vector<ParameterSpec> (*parameters)(const ModelSpec& spec);
};

// Every family the engine knows, in registry.cpp.
const std::vector<const Family*>& families();

}  // namespace moetune::model
