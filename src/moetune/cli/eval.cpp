#include "moetune/cli/eval.h"

#include <fmt/format.h>

#include <cmath>

#include "moetune/data/token_jsonl.h"
#include "moetune/model/language_model.h"
#include "moetune/model/model_description.h"
#include "moetune/ops/loss.h"

namespace moetune::cli {

using nlohmann::json;

json evaluate_model(const std::filesystem::path& folder, const std::filesystem::path& data, const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("eval --device '{}': expected auto, cpu or cuda", device);
  // The data file is opened before the weights load, so a mistyped path fails at once even for a large model.
  data::TokenJsonlReader reader(data, model::load_model_spec(folder / "config.json").vocab_size);
  const std::unique_ptr<model::LanguageModel> model = model::load_language_model(folder, device);
  // Σ cross-entropy and the number of predicted tokens of one sequence [1, length]: num_items_in_batch = 1 turns
  // the mean into the sum (on the GPU the fused head + loss never holds the logits).
  auto score = [&](const Tensor& input_ids) {
    const model::CausalLMOutput out = model->loss({input_ids, input_ids, {}, {}, 1.0, false});
    return ops::CrossEntropy{out.lm_loss, out.num_tokens};
  };

  double loss_sum = 0;
  int64_t tokens = 0, sequences = 0;
  while (std::optional<data::TokenSequence> sequence = reader.next()) {
    const int64_t length = int64_t(sequence->input_ids.size());
    const ops::CrossEntropy scored = score(Tensor::from_vector(sequence->input_ids, {1, length}));
    loss_sum += scored.loss_sum;
    tokens += scored.count;
    ++sequences;
  }
  if (sequences == 0) fail("{}: no sequences to score (the file is empty or holds only blank lines)", data.string());

  const double loss = loss_sum / double(tokens);
  return {{"model", folder.string()}, {"data", data.string()}, {"device", model->device().is_cpu() ? "cpu" : "cuda"},
          {"sequences", sequences}, {"tokens", tokens}, {"loss", loss}, {"perplexity", std::exp(loss)}};
}

std::string format_evaluation(const json& r) {
  return fmt::format("{} on {} ({}): {} sequences, {} tokens predicted\n  loss {:.6f} (mean token cross-entropy, nats)  "
                     "perplexity {:.4f}\n",
                     r["model"].get<std::string>(), r["data"].get<std::string>(), r["device"].get<std::string>(),
                     r["sequences"].get<int64_t>(),
                     r["tokens"].get<int64_t>(), r["loss"].get<double>(), r["perplexity"].get<double>());
}

}  // namespace moetune::cli
