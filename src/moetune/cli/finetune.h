// `moetune finetune`: a recipe (or, with neither a recipe nor a `--set model=`/`--set data.train=`, the embedded
// default: a tiny MoE learning a bundled task, with its held-out accuracy measured before and after) through the
// trainer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace moetune::cli {

struct FinetuneArgs {
  std::filesystem::path recipe;        // empty: the defaults and overrides alone (or the embedded default)
  std::vector<std::string> overrides;  // --set a.b=value
  bool resume = false;
  bool print_recipe = false;           // print the merged recipe, every default included, and do not train
};

int run_finetune(const FinetuneArgs& args);

// Greedy answers to the chat questions of `test_jsonl` (each line's last message is the reference reply):
// the fraction answered exactly. `limit` caps the questions asked.
double chat_accuracy(const std::filesystem::path& model_folder, const std::filesystem::path& test_jsonl, int64_t limit);

}  // namespace moetune::cli
