// One model API for both devices. The CPU fp32 reference (model::CausalLM) and the GPU bf16 model
// (model::cuda::CausalLM) are built by the same walk over the model description and implement this interface;
// eval, the engines and users of moetune.h talk to it without knowing the device.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moetune/model/batch.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/decode_cache.h"
#include "moetune/model/parameter_store.h"
#include "moetune/ops/router.h"

namespace moetune::model {

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual const ModelSpec& spec() const = 0;
  virtual Device device() const = 0;
  virtual ParameterStore& parameters() = 0;
  virtual const ModelWeights& weights() const = 0;

  // Forward, loss and backward of one micro-batch (labels required); gradients accumulate until zero_grad().
  virtual CausalLMOutput forward_backward(const Batch& batch) = 0;
  // The loss without gradients (labels required): lm_loss, aux_loss, num_tokens.
  virtual CausalLMOutput loss(const Batch& batch) = 0;
  // Logits [B, S, V] as f32 on the host.
  virtual Tensor logits(const Batch& batch) = 0;
  virtual void zero_grad() = 0;
  // LoRA dropout's draw (ops/lora_dropout.h) for the next training forward; each forward_backward moves it on by
  // one. The engines set it from the step (step·2²⁰ + micro-batch), so a resumed run draws the same masks.
  virtual void set_lora_draw(uint64_t draw) = 0;
  virtual void save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options = {}) const = 0;
  // Per MoE layer, the routing statistics of the last forward_backward.
  virtual std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const = 0;
  // What each block held for the backward pass in the last forward_backward ("layers.0.attention", ...).
  virtual std::vector<std::pair<std::string, size_t>> stash_report() const = 0;

  // Generation: a cache for a sequence of at most `max_tokens` tokens (the GPU's is allocated for all of them),
  // and the logits [V] (f32, on the host) of the token after `ids`, the next tokens of the sequence `cache` holds;
  // the model runs on `ids` alone and adds their keys and values to the cache.
  virtual std::unique_ptr<DecodeCache> new_decode_cache(int64_t max_tokens) = 0;
  virtual Tensor next_token_logits(const std::vector<int64_t>& ids, DecodeCache& cache) = 0;
};

// `device`: "cpu", "cuda", or "auto" (the GPU when one is visible). The CPU model is fp32, the GPU one bf16.
std::unique_ptr<LanguageModel> load_language_model(const std::filesystem::path& folder, const std::string& device,
                                                   const LoadOptions& options = {});

}  // namespace moetune::model
