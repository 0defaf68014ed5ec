#include "moetune/cli/eval.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "moetune/data/token_jsonl.h"
#include "moetune/model/model_description.h"
#include "moetune/model/causal_lm.h"
#include "moetune/ops/loss.h"
#if MOETUNE_HAVE_CUDA
#include "moetune/model/cuda/causal_lm.h"
#endif

namespace moetune::cli {

using nlohmann::json;

namespace {

// Σ cross-entropy and the number of predicted tokens of one sequence [1, length].
using SequenceScorer = std::function<ops::CrossEntropy(const Tensor& input_ids)>;

SequenceScorer cpu_scorer(const std::filesystem::path& folder) {
  auto model = std::make_shared<model::CausalLM>(model::CausalLM::from_pretrained(folder));
  return [model](const Tensor& input_ids) {
    const Tensor logits = model->forward(input_ids).view({input_ids.numel(), -1});
    return ops::cross_entropy(logits, ops::shift_labels(input_ids));
  };
}

SequenceScorer gpu_scorer(const std::filesystem::path& folder) {
#if MOETUNE_HAVE_CUDA
  if (cuda_device_count() == 0) fail("eval --device cuda: {}", cuda_unavailable_reason());
  auto model = std::make_shared<model::cuda::CausalLM>(model::cuda::CausalLM::from_pretrained(folder));
  return [model](const Tensor& input_ids) {
    // num_items_in_batch = 1 turns the mean into the sum; the fused head + loss never holds the logits.
    const model::CausalLMOutput out = model->loss({input_ids, input_ids, {}, {}, 1.0, false});
    return ops::CrossEntropy{out.lm_loss, out.num_tokens};
  };
#else
  (void)folder;
  fail("eval --device cuda: {}", cuda_unavailable_reason());
#endif
}

}  // namespace

json evaluate_model(const std::filesystem::path& folder, const std::filesystem::path& data, const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("eval --device '{}': expected auto, cpu or cuda", device);
  // The data file is opened before the weights load, so a mistyped path fails at once even for a large model.
  data::TokenJsonlReader reader(data, model::load_model_spec(folder / "config.json").vocab_size);
  const bool gpu = device == "cuda" || (device == "auto" && cuda_device_count() > 0);
  const SequenceScorer score = gpu ? gpu_scorer(folder) : cpu_scorer(folder);

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
  return {{"model", folder.string()}, {"data", data.string()}, {"device", gpu ? "cuda" : "cpu"},
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
