// The model weights as a recipe trains them: this rank's share (load_options), the parameters training.freeze
// names frozen, training.aux_loss_coef in place of config.json's router_aux_loss_coef, and the recipe's LoRA
// adapters attached (the base then frozen; QLoRA's base rounded through NF4).
#include "moetune/core/error.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/ops/cast.h"
#include "moetune/train/engine.h"

namespace moetune::train {
namespace {

// Adapters are made (and loaded from an adapter folder) in fp32 on the host, then placed as the engine's
// parameters are.
void attach_adapters(model::ModelWeights& weights, const Recipe& recipe, const model::LoraConfig& lora, DType dtype,
                     Device device) {
  const size_t base_count = weights.parameters.size();
  model::attach_lora(weights, lora);
  if (!recipe.lora.adapter.empty()) model::load_adapter_weights(weights, recipe.lora.adapter);
  // The GPU engine holds its NF4 base itself (model/cuda/nf4_base.h), taken from the loader.
  if (recipe.lora.quantize == "nf4" && device.is_cpu()) {
    MOETUNE_CHECK(dtype == DType::F32, "QLoRA's NF4 base is rounded in fp32 on the CPU engine");
    model::round_frozen_weights_to_nf4(weights);
  }
  for (size_t i = base_count; i < weights.parameters.size(); ++i) {
    Tensor& adapter = weights.parameters[i];
    if (adapter.dtype() != dtype) adapter = ops::cast(adapter, dtype);
    if (adapter.device() != device) adapter = adapter.to(device);
  }
}

}  // namespace

model::ModelWeights load_for_training(const Recipe& recipe, const parallel::ParallelLayout& layout, DType dtype, Device device,
                                      const std::function<void(model::LoadOptions&)>& adjust) {
  model::LoadOptions options = load_options(layout, dtype, device);
  options.frozen = recipe.training.freeze;
  if (adjust) adjust(options);
  // The loader names a pattern that matches nothing; say which recipe key it came from.
  model::ModelWeights weights = recipe.training.freeze.empty()
                                    ? model::load_checkpoint(recipe.model, options)
                                    : with_context("training.freeze", [&] { return model::load_checkpoint(recipe.model, options); });
  if (recipe.training.aux_loss_coef) weights.layout.spec.aux_loss_coef = *recipe.training.aux_loss_coef;
  if (const std::optional<model::LoraConfig> lora = lora_settings(recipe)) {
    if (layout.world > 1) fail("lora: LoRA does not run with several ranks yet; run one rank");
    attach_adapters(weights, recipe, *lora, dtype, device);
  }
  return weights;
}

}  // namespace moetune::train
