// LoRA adapters on weights whose block does not run them would be made, saved and never trained: such a recipe is
// refused, naming the weight and the HF modules to leave out of lora.target_modules.
#pragma once

#include <initializer_list>
#include <string>

#include "moetune/core/error.h"
#include "moetune/model/lora_linear.h"

namespace moetune::model {

inline void refuse_lora_on(const ParameterStore& store, const std::string& layer, std::initializer_list<const char*> weights,
                           const char* what, const char* hf_modules) {
  for (const char* weight : weights)
    MOETUNE_CHECK(LoraLinear::lookup(store, layer + weight).empty(),
                  "{}{}: LoRA on {} is not implemented; leave {} out of lora.target_modules", layer, weight, what, hf_modules);
}

}  // namespace moetune::model
