// `moetune inspect --lora-rank R ...`: what a LoRA fine-tune trains and holds. The base weights are frozen
// (weights only: no gradient, master copy or optimizer state); the adapters train like any parameter.
#include <fmt/format.h>

#include "moetune/cli/inspect.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/model_description.h"
#include "moetune/ops/adamw_math.h"

namespace moetune::cli {

void add_lora_plan(nlohmann::json& report, const std::filesystem::path& folder, const model::LoraConfig& lora) {
  lora.validate("inspect --lora-*");
  const model::ParameterLayout layout = model::parameter_layout(model::load_model_spec(folder / "config.json"));
  int64_t trainable = 0, adapters = 0, state_blocks = 0, dense_adapters = 0, expert_adapters = 0;
  for (const model::ParameterSpec& spec : model::lora_parameters(layout, lora)) {
    trainable += shape_numel(spec.shape);
    state_blocks += ops::adamw_state_blocks(shape_numel(spec.shape));
    ++adapters;
    if (spec.name.find(".lora_A.") != std::string::npos) ++(spec.name.find(".experts_") != std::string::npos ? expert_adapters : dense_adapters);
  }
  // The GPU blocks keep u = x·Aᵀ (bf16, r wide) per adapter for the backward pass: one row per token, per routed
  // row (top-k per token) for the experts.
  int64_t top_k = 0;
  for (const model::LayerSpec& layer : layout.spec.layers)
    if (const model::MoeSpec* moe = layer.moe()) top_k = moe->router.top_k;
  const int64_t stash_per_token = 2 * lora.rank * (dense_adapters + top_k * expert_adapters);
  const int64_t frozen = layout.total_parameters();
  // QLoRA: the projections and experts in NF4 (4 bits, an 8-bit absmax code per 64, a float scale per 64·256),
  // and on the GPU one layer's bf16 scratch they are dequantized into (model/cuda/nf4_base.h).
  const model::Nf4BasePlan base = model::nf4_base_plan(model::with_lora(layout, lora));
  const int64_t quantized = base.quantized_parameters, nf4_bytes = base.nf4_bytes + base.scratch_bytes;
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& plan : model::precision_plans())
    memory.push_back({{"precision", plan.name},
                      {"total_bytes", plan.weight_bytes * frozen + plan.static_bytes(trainable, state_blocks)},
                      {"qlora_nf4_total_bytes",
                       plan.weight_bytes * (frozen - quantized) + nf4_bytes + plan.static_bytes(trainable, state_blocks)}});
  report["lora"] = {{"rank", lora.rank},
                    {"scale", lora.scale()},
                    {"adapter_tensors", adapters},
                    {"trainable_parameters", trainable},
                    {"frozen_parameters", frozen},
                    {"trainable_fraction", double(trainable) / double(trainable + frozen)},
                    {"gpu_stash_bytes_per_token", stash_per_token},
                    {"qlora_gpu_scratch_bytes", base.scratch_bytes},
                    {"memory", memory}};
}

std::string format_lora_plan(const nlohmann::json& report) {
  if (!report.contains("lora")) return "";
  const nlohmann::json& l = report["lora"];
  std::string out = fmt::format("LoRA rank {} (scale {:.4g}): {} adapter tensors, {} trainable parameters ({:.3f}% of {}), base frozen\n",
                                l["rank"].get<int64_t>(), l["scale"].get<double>(), l["adapter_tensors"].get<int64_t>(),
                                l["trainable_parameters"].get<int64_t>(), 100 * l["trainable_fraction"].get<double>(),
                                l["frozen_parameters"].get<int64_t>() + l["trainable_parameters"].get<int64_t>());
  out += fmt::format("  on the GPU engine (bf16, one GPU) its adapters keep {} bytes a token for the backward pass (none "
                     "in a sublayer that training.recompute recomputes); QLoRA's NF4 base adds a {:.3f} GB bf16 scratch "
                     "for one layer's weights, counted below\n",
                     l["gpu_stash_bytes_per_token"].get<int64_t>(), l["qlora_gpu_scratch_bytes"].get<double>() / 1e9);
  for (const nlohmann::json& m : l["memory"])
    out += fmt::format("  {:<30} {:>10.3f} GB static ({:.3f} GB with an NF4 base, QLoRA)\n", m["precision"].get<std::string>(),
                       m["total_bytes"].get<double>() / 1e9, m["qlora_nf4_total_bytes"].get<double>() / 1e9);
  return out;
}

}  // namespace moetune::cli
