// A decoder-only causal LM (every family of model/families/) on the CPU in fp32: the reference every GPU kernel is
// compared with. The API reads like transformers': from_pretrained, forward (logits, loss, aux loss),
// backward (gradients accumulate, as loss.backward() does), save_pretrained. There is no autograd: each block
// has an explicit backward and keeps its own stash, whose size stash_bytes() reports.
#pragma once

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "moetune/model/attention_block.h"
#include "moetune/model/decoder_walk.h"
#include "moetune/model/gated_delta_block.h"
#include "moetune/model/language_model.h"
#include "moetune/model/mamba2_block.h"
#include "moetune/model/mlp_block.h"
#include "moetune/model/moe_block.h"
#include "moetune/model/parameter_store.h"
#include "moetune/model/step_context.h"

namespace moetune::model {

// The CPU's blocks for the decoder walk (decoder_walk.h).
struct CpuBlocks {
  using Attention = AttentionBlock;
  using Mlp = DenseMlpBlock;
  using Moe = MoeBlock;
  using Mamba2 = Mamba2Block;
  using GatedDelta = GatedDeltaBlock;
  using Dispatcher = LocalDispatcher;
  using DispatcherBase = TokenDispatcher;
};

class CausalLM final : public LanguageModel {
 public:
  static CausalLM from_pretrained(const std::filesystem::path& folder);
  // From weights already loaded (fp32, on the CPU): tests build the reference on bf16-rounded weights this way;
  // expert parallelism loads its share of the experts and passes its all-to-all dispatcher.
  static CausalLM from_weights(ModelWeights weights, const DispatcherFactory<CpuBlocks>& make_dispatcher = {}) {
    return CausalLM(std::move(weights), make_dispatcher);
  }

  // Keeps the stash for backward() when labels are given.
  CausalLMOutput forward(const Batch& batch);
  // Logits only, for evaluation: input_ids [B, S], position_ids as in Batch.
  Tensor forward(const Tensor& input_ids, const Tensor& position_ids = {});
  // Adds d(loss)/d(parameter) of the last forward into the gradients, then drops the stash.
  void backward();
  // Generation (language_model.h); the cache is a KvCache.
  std::unique_ptr<DecodeCache> new_decode_cache(int64_t) override { return std::make_unique<KvCache>(); }
  Tensor next_token_logits(const std::vector<int64_t>& ids, DecodeCache& cache) override;

  // The device-neutral API (language_model.h).
  CausalLMOutput forward_backward(const Batch& batch) override;
  CausalLMOutput loss(const Batch& batch) override;
  Tensor logits(const Batch& batch) override;
  Device device() const override { return Device::cpu(); }
  void zero_grad() override { store_->zero_grad(); }
  void set_lora_draw(uint64_t draw) override { lora_draw_ = draw; }
  // Drops what the last forward kept for backward() (evaluation does not need it).
  void clear_stash();
  void save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options = {}) const override;

  ParameterStore& parameters() override { return *store_; }
  const ModelWeights& weights() const override { return store_->weights(); }
  const ModelSpec& spec() const override { return store_->weights().spec(); }
  // What the last forward keeps for the backward pass, block by block ("layers.0.attention", "layers.0.moe",
  // "head": final hidden state and logits), and in total.
  std::vector<std::pair<std::string, size_t>> stash_report() const override;
  size_t stash_bytes() const;
  // Per MoE layer (index, stats) for the last forward while its stash is held (before backward()), else for the
  // last forward_backward.
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const override;
  // Tokens per expert of each MoE sublayer, summed over the forward_backward calls since the last
  // update_router_bias (what the aux-loss-free balancing reads; model/router_bias_balance.h).
  const std::vector<std::vector<double>>& pending_expert_load() const { return pending_load_; }
  // Moves every MoE layer's correction bias by `rate` toward balance and starts counting afresh; fails for a
  // model whose routers have no correction bias.
  void update_router_bias(double rate);
  // Of every MoE sublayer, in walk order: the last forward's routing (logits, choices, weights).
  std::vector<ops::Routing> routings() const;
  // Tests: each MoE sublayer's later forwards take its entry's choices (MoeBlock::force_choices), so that this
  // reference follows another engine's routing; an empty list restores the routers' own choice.
  void force_routing(const std::vector<std::vector<int32_t>>& chosen_per_moe_layer);

 private:
  struct Stash {
    Tensor input_ids;
    StepContext context;
    Tensor final_hidden;            // before the final norm
    Tensor logits;                  // [T, V]
    std::vector<int64_t> targets;   // shifted labels
    double lm_scale = 0;            // d(loss)/d(loss_sum)
    double aux_scale = 0;           // router_aux_loss_coef, or 0 without the aux loss
    bool ready = false;
  };

  CausalLM(ModelWeights weights, const DispatcherFactory<CpuBlocks>& make_dispatcher);
  Tensor run_layers(const Tensor& input_ids, StepContext& context);
  Tensor head_logits(const Tensor& final_hidden) const;  // final norm and LM head: [T, V]
  // Granite's logits_scaling (ModelSpec::logits_divisor): `logits` (F32, owned) divided by it in place.
  Tensor divided_by_logits_scaling(Tensor logits) const;

  std::unique_ptr<ParameterStore> store_;  // on the heap: the blocks keep references into it
  std::vector<Sublayer<CpuBlocks>> sublayers_;
  Stash stash_;
  bool training_ = false;  // inside forward_backward: the forward is a training step's
  uint64_t lora_draw_ = 0;  // LoRA dropout's draw for the next training forward
  std::vector<std::pair<int64_t, ops::RouterStats>> last_router_stats_;
  std::vector<std::vector<double>> pending_load_;  // per MoE sublayer, in walk order
};

}  // namespace moetune::model
