#include "moetune/cli/finetune.h"

#include "moetune/parallel/world.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "moetune/core/error.h"
#include "moetune/data/text_codec.h"
#include "moetune/io/hub_cache.h"
#include "moetune/train/recipe_data.h"
#include "moetune/io/json_file.h"
#include "moetune/model/generate.h"
#include "moetune/model/lora_weights.h"
#include "moetune/parallel/world.h"
#include "moetune/train/trainer.h"

namespace moetune::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// As a shell reports a process that SIGINT ended: 128 + 2.
constexpr int kInterruptedStatus = 130;

// The bundled task (scripts/make_default_assets.py): a 161K-parameter Qwen3-MoE learns to answer
// "Which is larger, 47 or 52?" in chat form. Sized to finish in about a minute on 2 CPU cores.
constexpr const char* kDefaultRecipe = R"(
data:
  format: messages
  max_length: 64
  packing: true
training:
  micro_batch_size: 8
  max_steps: 300
  seed: 1234
optimizer:
  lr: 3.0e-3
  weight_decay: 0.0
  max_grad_norm: 1.0
schedule:
  type: cosine
  warmup_steps: 20
  min_lr_ratio: 0.1
output:
  save_every: 100
  keep_last: 1
logging:
  every: 10
)";

// The bundled assets: MOETUNE_ASSETS_DIR when set; else those installed beside this binary
// (<prefix>/share/moetune/assets for <prefix>/bin/moetune, found from /proc/self/exe, so an installed moetune runs
// from any folder); else those of the source tree it was built from.
fs::path assets_folder() {
  if (const char* dir = std::getenv("MOETUNE_ASSETS_DIR")) return dir;
  std::error_code unreadable;
  const fs::path binary = fs::read_symlink("/proc/self/exe", unreadable);
  const fs::path installed = (binary.parent_path() / MOETUNE_INSTALLED_ASSETS_DIR).lexically_normal();
  if (!unreadable && fs::is_directory(installed / "default")) return installed;
  if (fs::is_directory(fs::path(MOETUNE_SOURCE_ASSETS_DIR) / "default")) return MOETUNE_SOURCE_ASSETS_DIR;
  fail("the embedded default's assets are neither installed beside {} ({}) nor in the source tree it was built from "
       "({}): run `cmake --install` again, or set MOETUNE_ASSETS_DIR to a folder holding default/",
       binary.string(), installed.string(), MOETUNE_SOURCE_ASSETS_DIR);
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", std::localtime(&now));
  return text;
}

// The output folder of the embedded default: a new timestamped one, or with --resume the newest earlier one (a new
// folder would hold nothing to resume).
fs::path default_output(bool resume) {
  const fs::path runs = "moetune-default-run";
  if (!resume) return runs / timestamp();
  std::vector<fs::path> earlier;
  if (fs::is_directory(runs))
    for (const auto& item : fs::directory_iterator(runs))
      if (item.is_directory()) earlier.push_back(item.path());
  if (earlier.empty()) fail("{}: --resume, but there is no earlier run of the embedded default here", runs.string());
  const fs::path newest = *std::max_element(earlier.begin(), earlier.end());  // timestamps sort as text
  // Said now, not after the minute of the accuracy pass that comes first.
  if (train::list_checkpoints(newest).empty())
    fail("{}: --resume, but there is no checkpoint-* folder to resume from", newest.string());
  return newest;
}

}  // namespace

double chat_accuracy(const fs::path& model_folder, const fs::path& test_jsonl, int64_t limit) {
  // A LoRA run's folder holds the adapter alone: the model is its base with the adapter on.
  const bool adapter = fs::exists(model_folder / "adapter_config.json");
  const fs::path base = adapter ? fs::path(model::read_adapter_config(model_folder).base_model) : model_folder;
  model::CausalLM model = adapter ? model::CausalLM::from_weights(model::load_with_adapter(base, model_folder))
                                  : model::CausalLM::from_pretrained(model_folder);
  const data::ModelText text = data::load_model_text(base);
  if (!text.tokenizer || !text.codec.render_chat) fail("{}: needs a tokenizer and a chat template", base.string());
  std::ifstream stream(test_jsonl);
  if (!stream) fail("{}: cannot open", test_jsonl.string());
  int64_t asked = 0, right = 0;
  for (std::string line; asked < limit && std::getline(stream, line) && !train::Trainer::stop_requested.load();) {
    if (line.empty()) continue;
    data::Json messages = io::parse_json_text<data::Json>(line, test_jsonl.string())["messages"];
    const std::string reference = messages.back()["content"];
    messages.erase(messages.size() - 1);
    const std::vector<int64_t> prompt = text.codec.encode(text.codec.render_chat(messages, true, data::Json()));
    std::vector<int64_t> reply = model::generate(model, prompt, {.max_new_tokens = 8, .stop_ids = text.stop_ids});
    if (!reply.empty() && std::find(text.stop_ids.begin(), text.stop_ids.end(), reply.back()) != text.stop_ids.end())
      reply.pop_back();
    const std::string answer = text.tokenizer->decode(std::vector<int32_t>(reply.begin(), reply.end()));
    right += answer == reference;
    ++asked;
  }
  return asked ? double(right) / double(asked) : 0.0;
}

namespace {

int run_recipe(const FinetuneArgs& args) {
  train::Recipe recipe = train::load_recipe(args.recipe, args.overrides);
  train::require_model_and_data(recipe);  // else load_model_text("") would read ./config.json
  recipe.model = io::resolve_model_folder(recipe.model).string();  // a hub id: its folder in the local HF cache
  train::Trainer trainer(recipe, train::recipe_model_text(recipe, recipe.model).codec, args.resume);
  const train::TrainResult result = trainer.run();
  if (parallel::detect_launch().rank == 0)
    std::printf("%s after %lld steps; model: %s\n", result.interrupted ? "stopped" : "finished",
                static_cast<long long>(result.steps), result.final_model.string().c_str());
  return 0;
}

int run_default(const FinetuneArgs& args) {
  const fs::path assets = assets_folder() / "default";
  std::vector<std::string> overrides = {"model=" + (assets / "model").string(), "data.train=" + (assets / "train.jsonl").string(),
                                        "output.dir=" + default_output(args.resume).string()};
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  train::Recipe recipe = train::parse_recipe(kDefaultRecipe, "the embedded default recipe", overrides);
  const fs::path test = assets / "test.jsonl";
  // With several ranks (--nproc-per-node) rank 0 alone measures and reports.
  const bool reports = parallel::detect_launch().rank == 0;
  double before = 0;
  if (reports) {
    std::printf("moetune finetune (embedded default): %s learns \"Which is larger, 47 or 52?\" from %s\n",
                recipe.model.c_str(), recipe.data.train.front().c_str());
    std::fflush(stdout);
    before = chat_accuracy(recipe.model, test, 200);
    std::printf("held-out accuracy before: %.1f%% (200 questions it never trains on)\n", 100 * before);
    std::fflush(stdout);  // before the trainer's progress lines on stderr
  }
  const auto start = std::chrono::steady_clock::now();
  train::Trainer trainer(recipe, train::recipe_model_text(recipe, recipe.model).codec, args.resume);
  const train::TrainResult result = trainer.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.final_model.empty()) {
    if (reports) std::printf("stopped before the first step; nothing was saved\n");
    return kInterruptedStatus;
  }
  if (!reports) return 0;
  const double after = chat_accuracy(result.final_model, test, 200);
  std::printf("held-out accuracy after %lld steps (%.0f s): %.1f%%  (before: %.1f%%)\nsaved HF folder: %s\n",
              static_cast<long long>(result.steps), seconds, 100 * after, 100 * before, result.final_model.string().c_str());
  return 0;
}

// A run that names its model or training data is the user's own job, with or without a recipe file: the embedded
// default's bundled task and accuracy test mean nothing for another model.
bool names_own_job(const FinetuneArgs& args) {
  if (!args.recipe.empty()) return true;
  for (const std::string& assignment : args.overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    if (key == "model" || key == "data.train") return true;
  }
  return false;
}

}  // namespace

int run_finetune(const FinetuneArgs& args) {
  if (args.print_recipe) {
    std::printf("%s\n", train::load_recipe(args.recipe, args.overrides).json.dump(2).c_str());
    return 0;
  }
  train::Trainer::install_stop_handlers();
  try {
    return names_own_job(args) ? run_recipe(args) : run_default(args);
  } catch (const train::StartupInterrupted& e) {
    std::fprintf(stderr, "moetune: %s\n", e.what());
    return kInterruptedStatus;
  }
}

}  // namespace moetune::cli
