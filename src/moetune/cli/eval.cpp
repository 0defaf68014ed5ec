#include "moetune/cli/eval.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "moetune/cli/device_choice.h"
#include "moetune/data/data_files.h"
#include "moetune/data/loader.h"
#include "moetune/data/text_codec.h"
#include "moetune/model/language_model.h"
#include "moetune/model/model_description.h"
#include "moetune/ops/loss.h"
#include "moetune/train/recipe_data.h"

namespace moetune::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A folder of its own for the decompressed copies of .gz data, removed with it.
class ScratchFolder {
 public:
  ScratchFolder() {
    std::string pattern = (fs::temp_directory_path() / "moetune-eval-XXXXXX").string();
    if (!mkdtemp(pattern.data())) fail("cannot make a temporary folder under {}", fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

json evaluate_model(const EvalArgs& args) {
  if (args.device != "auto" && args.device != "cpu" && args.device != "cuda")
    fail("eval --device '{}': expected auto, cpu or cuda", args.device);
  if (args.max_length < 0) fail("eval --max-length {}: expected 0 (whole lines) or more", args.max_length);
  // The data is found and read through before the weights load, so a mistyped path or a bad line fails at once
  // even for a large model.
  const bool with_recipe = !args.recipe.empty() || !args.overrides.empty();
  const train::Recipe recipe = train::load_recipe(args.recipe, args.overrides);
  const std::vector<std::string> data = args.data.empty() ? recipe.data.validation : args.data;
  if (data.empty())
    fail("eval: no data; give --data FILE..., or a recipe (-c) whose data.validation names the held-out files");
  const ScratchFolder scratch;
  const std::vector<fs::path> files =
      data::resolve_data_files(data, args.data.empty() ? "data.validation" : "--data", scratch.path());
  data::TextCodec codec = train::recipe_model_text(recipe, args.model).codec;
  codec.vocab_size = model::load_model_spec(args.model / "config.json").vocab_size;
  const std::vector<data::LineRef> lines = data::index_lines(files, 0.0, 0).train;
  // Training's reading of the lines, one line a batch.
  data::LoaderOptions options = train::recipe_loader_options(recipe, /*shuffle=*/false);
  options.packing = false;
  options.micro_batch_size = 1;
  if (args.format != "auto") options.format = data::format_from_name(args.format);
  options.max_length = args.max_length > 0 ? args.max_length
                       : with_recipe       ? recipe.data.max_length
                                           : std::numeric_limits<int32_t>::max();
  auto read_all = [&](auto&& each) {
    data::DataLoader loader(files, lines, codec, options);
    for (data::MicroBatch batch; (batch = loader.next(/*single_pass=*/true)).input_ids.defined();) each(batch);
  };
  int64_t sequences = 0, scored = 0;
  read_all([&](const data::MicroBatch& batch) {
    ++sequences;
    scored += batch.scored;
  });
  if (scored == 0) fail("{}: no token of the data is scored (every line is fully masked)", fmt::join(data, ", "));

  const std::unique_ptr<model::LanguageModel> model =
      model::load_language_model(args.model, choose_device(args.model, args.device, ModelUse::Scoring));
  // num_items_in_batch = 1 turns the mean into the sum (on the GPU the fused head + loss never holds the logits).
  double loss_sum = 0;
  int64_t tokens = 0;
  read_all([&](const data::MicroBatch& batch) {
    const model::CausalLMOutput out =
        model->loss({batch.input_ids, batch.labels, batch.attention_mask, batch.position_ids, 1.0, false});
    loss_sum += out.lm_loss;
    tokens += out.num_tokens;
  });
  const double loss = loss_sum / double(tokens);
  return {{"model", args.model.string()}, {"data", fmt::format("{}", fmt::join(data, ", "))},
          {"device", model->device().is_cpu() ? "cpu" : "cuda"}, {"sequences", sequences}, {"tokens", tokens},
          {"loss", loss}, {"perplexity", std::exp(loss)}};
}

std::string format_evaluation(const json& r) {
  return fmt::format("{} on {} ({}): {} sequences, {} tokens predicted\n  loss {:.6f} (mean token cross-entropy, nats)  "
                     "perplexity {:.4f}\n",
                     r["model"].get<std::string>(), r["data"].get<std::string>(), r["device"].get<std::string>(),
                     r["sequences"].get<int64_t>(),
                     r["tokens"].get<int64_t>(), r["loss"].get<double>(), r["perplexity"].get<double>());
}

}  // namespace moetune::cli
