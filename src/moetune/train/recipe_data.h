// What a recipe's data section means to whatever reads data: the loader's options (line shapes, data.columns /
// data.roles, masks, lengths, packing, bad lines) and the model's text codec with data.chat_template and
// data.chat_template_kwargs. Training and `moetune eval -c RECIPE` both read data through these, so eval scores
// exactly the tokens training scores.
#pragma once

#include <filesystem>

#include "moetune/data/loader.h"
#include "moetune/data/text_codec.h"
#include "moetune/train/recipe.h"

namespace moetune::train {

// Without data.train_weights' mixing, which depends on the files found for data.train.
data::LoaderOptions recipe_loader_options(const Recipe& recipe, bool shuffle);

// The tokenizer and chat template of `model_folder` (the recipe's model, or a model trained from it), the template
// replaced by the recipe's data.chat_template when it names one.
data::ModelText recipe_model_text(const Recipe& recipe, const std::filesystem::path& model_folder);

}  // namespace moetune::train
