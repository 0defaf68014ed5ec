// The model weights as a recipe trains them: this rank's share (load_options), the parameters training.freeze
// names frozen, and training.aux_loss_coef in place of config.json's router_aux_loss_coef.
#include "moetune/core/error.h"
#include "moetune/train/engine.h"

namespace moetune::train {

model::ModelWeights load_for_training(const Recipe& recipe, const parallel::ParallelLayout& layout, DType dtype, Device device) {
  model::LoadOptions options = load_options(layout, dtype, device);
  options.frozen = recipe.training.freeze;
  // The loader names a pattern that matches nothing; say which recipe key it came from.
  model::ModelWeights weights = recipe.training.freeze.empty()
                                    ? model::load_checkpoint(recipe.model, options)
                                    : with_context("training.freeze", [&] { return model::load_checkpoint(recipe.model, options); });
  if (recipe.training.aux_loss_coef) weights.layout.spec.aux_loss_coef = *recipe.training.aux_loss_coef;
  return weights;
}

}  // namespace moetune::train
