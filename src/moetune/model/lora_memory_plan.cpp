#include "moetune/model/lora_memory_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "moetune/model/gradient_ready_layer.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/ops/nf4.h"

namespace moetune::model {
namespace {

// The block kind (memory_plan.h's block_kind) an engine parameter belongs to: "layers.3.attn.qkv.lora_A.1".
std::string kind_of(const std::string& name) {
  if (name.find(".attn.") != std::string::npos) return "attention";
  return name.find(".moe.") != std::string::npos ? "moe" : "mlp";
}

const SublayerSpec* sublayer_of(const ModelSpec& spec, int64_t layer, const std::string& kind) {
  if (layer < 0 || layer >= spec.num_layers()) return nullptr;
  for (const SublayerSpec& sublayer : spec.layers[size_t(layer)].sublayers)
    if (kind == block_kind(sublayer)) return &sublayer;
  return nullptr;
}

}  // namespace

ParameterLayout with_lora(ParameterLayout layout, const LoraConfig& config) {
  const std::vector<ParameterSpec> adapters = lora_parameters(layout, config);
  for (ParameterSpec& spec : layout.parameters) spec.trainable = false;
  layout.parameters.insert(layout.parameters.end(), adapters.begin(), adapters.end());
  return layout;
}

int64_t lora_gpu_stash_bytes(const ParameterLayout& layout, int64_t rank, int64_t tokens, Recompute recompute,
                             int64_t keep_last_layers) {
  const ModelSpec& spec = layout.spec;
  int64_t bytes = 0;
  for (const ParameterSpec& p : layout.parameters) {
    if (p.name.find(".lora_A.") == std::string::npos) continue;
    const std::string kind = kind_of(p.name);
    const int64_t layer = gradient_ready_layer(p.name, spec.num_layers());
    const SublayerSpec* sublayer = sublayer_of(spec, layer, kind);
    if (!sublayer || recomputes(recompute, *sublayer, layer, spec.num_layers(), keep_last_layers)) continue;
    const int64_t rows = kind == "moe" ? tokens * sublayer->moe()->router.top_k : tokens;
    bytes += rows * rank * 2;
  }
  return bytes;
}

Nf4BasePlan nf4_base_plan(const ParameterLayout& layout) {
  Nf4BasePlan plan;
  std::map<int64_t, int64_t> per_layer;
  for (const ParameterSpec& p : layout.parameters) {
    if (!quantized_by_qlora(p) || p.trainable) continue;
    const int64_t n = shape_numel(p.shape), blocks = (n + ops::kNf4BlockSize - 1) / ops::kNf4BlockSize;
    plan.quantized_parameters += n;
    // As Nf4DeviceTensor holds it: codes two a byte, an absmax code per block, a scale per 256 blocks, the tables.
    plan.nf4_bytes += (n + 1) / 2 + blocks + (blocks + ops::kNf4AbsmaxBlockSize - 1) / ops::kNf4AbsmaxBlockSize * 4 + 272 * 4;
    per_layer[gradient_ready_layer(p.name, layout.spec.num_layers())] += (n + 7) / 8 * 8 * 2;
  }
  for (const auto& [layer, bytes] : per_layer) plan.scratch_bytes = std::max(plan.scratch_bytes, bytes);
  return plan;
}

}  // namespace moetune::model
