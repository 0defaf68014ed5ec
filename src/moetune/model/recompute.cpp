#include "moetune/model/recompute.h"

#include "moetune/core/error.h"

namespace moetune::model {

Recompute parse_recompute(const std::string& value, const std::string& key) {
  if (value == "none") return Recompute::None;
  if (value == "experts") return Recompute::Experts;
  if (value == "attention") return Recompute::Attention;
  if (value == "full") return Recompute::Full;
  fail("'{}' is '{}', not one of: none, experts, attention, full", key, value);
}

const char* recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::None: return "none";
    case Recompute::Experts: return "experts";
    case Recompute::Attention: return "attention";
    case Recompute::Full: return "full";
  }
  return "?";
}

bool recomputes(Recompute mode, const SublayerSpec& sublayer) {
  switch (mode) {
    case Recompute::None: return false;
    case Recompute::Experts: return sublayer.attention() == nullptr;
    case Recompute::Attention: return sublayer.attention() != nullptr;
    case Recompute::Full: return true;
  }
  return false;
}

bool recomputes(Recompute mode, const SublayerSpec& sublayer, int64_t layer, int64_t num_layers, int64_t keep_last_layers) {
  return layer < num_layers - keep_last_layers && recomputes(mode, sublayer);
}

bool keeps_outputs(Recompute mode, bool lora) { return mode == Recompute::None && !lora; }

}  // namespace moetune::model
