#include "moetune/cli/eval.h"

#include <fmt/format.h>

#include <cmath>

#include "moetune/data/token_jsonl.h"
#include "moetune/io/hf_config.h"
#include "moetune/model/causal_lm.h"
#include "moetune/ops/loss.h"

namespace moetune::cli {

using nlohmann::json;

json evaluate_model(const std::filesystem::path& folder, const std::filesystem::path& data) {
  // The data file is opened before the weights load, so a mistyped path fails at once even for a large model.
  data::TokenJsonlReader reader(data, io::load_config(folder / "config.json").vocab_size);
  model::CausalLM model = model::CausalLM::from_pretrained(folder);

  double loss_sum = 0;
  int64_t tokens = 0, sequences = 0;
  while (std::optional<data::TokenSequence> sequence = reader.next()) {
    const int64_t length = int64_t(sequence->input_ids.size());
    const Tensor input_ids = Tensor::from_vector(sequence->input_ids, {1, length});
    const Tensor logits = model.forward(input_ids).view({length, -1});
    const ops::CrossEntropy scored = ops::cross_entropy(logits, ops::shift_labels(input_ids));
    loss_sum += scored.loss_sum;
    tokens += scored.count;
    ++sequences;
  }
  if (sequences == 0) fail("{}: no sequences to score (the file is empty or holds only blank lines)", data.string());

  const double loss = loss_sum / double(tokens);
  return {{"model", folder.string()}, {"data", data.string()}, {"sequences", sequences},
          {"tokens", tokens}, {"loss", loss}, {"perplexity", std::exp(loss)}};
}

std::string format_evaluation(const json& r) {
  return fmt::format("{} on {}: {} sequences, {} tokens predicted\n  loss {:.6f} (mean token cross-entropy, nats)  "
                     "perplexity {:.4f}\n",
                     r["model"].get<std::string>(), r["data"].get<std::string>(), r["sequences"].get<int64_t>(),
                     r["tokens"].get<int64_t>(), r["loss"].get<double>(), r["perplexity"].get<double>());
}

}  // namespace moetune::cli
