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
#include "moetune/model/mlp_block.h"
#include "moetune/model/moe_block.h"
#include "moetune/model/parameter_store.h"
#include "moetune/model/sequence_layout.h"

namespace moetune::model {

struct Batch {
  Tensor input_ids;                            // [B, S] I64
  Tensor labels;                               // [B, S] I64, -100 where not scored; undefined: no loss
  Tensor attention_mask;                       // [B, S] I64, 0 for padding; undefined: none
  Tensor position_ids;                         // [B, S] I64, restarting per packed document; undefined: 0..S-1
  std::optional<double> num_items_in_batch;    // CE = sum / this (gradient accumulation) instead of the mean
  std::optional<bool> output_router_logits;    // add the MoE aux loss; default: config.json's setting
};

struct CausalLMOutput {
  Tensor logits;             // [B, S, V] fp32
  double loss = NAN;         // lm_loss + router_aux_loss_coef · aux_loss; NaN without labels
  double lm_loss = NAN;      // the cross-entropy part
  double aux_loss = NAN;     // the load-balancing loss; NaN when not computed
  int64_t num_tokens = 0;    // tokens the cross-entropy counted
};

class CausalLM {
 public:
  static CausalLM from_pretrained(const std::filesystem::path& folder);
  // From weights already loaded (fp32, on the CPU): tests build the reference on bf16-rounded weights this way.
  static CausalLM from_weights(ModelWeights weights) { return CausalLM(std::move(weights)); }

  // Keeps the stash for backward() when labels are given.
  CausalLMOutput forward(const Batch& batch);
  // Logits only, for evaluation: input_ids [B, S], position_ids as in Batch.
  Tensor forward(const Tensor& input_ids, const Tensor& position_ids = {});
  // Adds d(loss)/d(parameter) of the last forward into the gradients, then drops the stash.
  void backward();
  void zero_grad() { store_->zero_grad(); }
  // Drops what the last forward kept for backward() (evaluation does not need it).
  void clear_stash();
  void save_pretrained(const std::filesystem::path& folder, const io::SaveOptions& options = {}) const;

  ParameterStore& parameters() { return *store_; }
  const ModelWeights& weights() const { return store_->weights(); }
  const ModelSpec& spec() const { return store_->weights().spec(); }
  // What the last forward keeps for the backward pass, block by block ("layers.0.attention", "layers.0.moe",
  // "head": final hidden state and logits), and in total.
  std::vector<std::pair<std::string, size_t>> stash_report() const;
  size_t stash_bytes() const;
  // Per MoE layer (index, stats) for the last forward, while its stash is held (before backward()).
  std::vector<std::pair<int64_t, ops::RouterStats>> router_stats() const;

 private:
  // One residual sublayer of the walk over the description, exactly one block set.
  struct Sublayer {
    int64_t layer = 0;
    std::string name;  // "layers.0.attention", "layers.0.moe", ...: the stash report's key
    std::unique_ptr<AttentionBlock> attention;
    std::unique_ptr<DenseMlpBlock> mlp;
    std::unique_ptr<MoeBlock> moe;
  };
  struct Stash {
    Tensor input_ids;
    SequenceLayout layout;
    Tensor final_hidden;            // before the final norm
    Tensor logits;                  // [T, V]
    std::vector<int64_t> targets;   // shifted labels
    double lm_scale = 0;            // d(loss)/d(loss_sum)
    double aux_scale = 0;           // router_aux_loss_coef, or 0 without the aux loss
    bool ready = false;
  };

  explicit CausalLM(ModelWeights weights);
  std::vector<ops::Routing> routings() const;  // of every MoE sublayer, in order
  Tensor run_layers(const Tensor& input_ids, const SequenceLayout& layout);

  std::unique_ptr<ParameterStore> store_;  // on the heap: the blocks keep references into it
  std::vector<Sublayer> sublayers_;
  Stash stash_;
};

}  // namespace moetune::model
