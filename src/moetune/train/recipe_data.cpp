#include "moetune/train/recipe_data.h"

namespace moetune::train {

data::LoaderOptions recipe_loader_options(const Recipe& r, bool shuffle) {
  return {data::format_from_name(r.data.format), r.data.loss_on_prompt, r.data.max_length, r.data.packing,
          shuffle,                                r.data.bad_lines == "skip", r.training.micro_batch_size,
          uint64_t(r.training.seed),              data::LineMapping(r.data.columns, r.data.roles)};
}

data::ModelText recipe_model_text(const Recipe& recipe, const std::filesystem::path& model_folder) {
  return data::load_model_text(model_folder, {recipe.data.chat_template, recipe.data.chat_template_kwargs});
}

}  // namespace moetune::train
