// A decoder-only causal LM (Llama, Qwen3, Qwen3-MoE) on the CPU in fp32: the reference every GPU kernel
// is compared with. Forward only for now; each block's backward and its stash come next (issue 3).
#pragma once

#include <filesystem>

#include "moetune/io/checkpoint.h"

namespace moetune::model {

class CausalLM {
 public:
  static CausalLM from_pretrained(const std::filesystem::path& folder);

  // input_ids [B, S] (i64). position_ids [B, S] or undefined (then 0..S-1 per row); where a position does
  // not follow its predecessor by one a new document starts, and attention does not cross it (packing).
  // Returns logits [B, S, vocab] in fp32.
  Tensor forward(const Tensor& input_ids, const Tensor& position_ids = {}) const;

  const io::ModelWeights& weights() const { return weights_; }
  const io::ModelConfig& config() const { return weights_.config(); }

 private:
  explicit CausalLM(io::ModelWeights weights) : weights_(std::move(weights)) {}
  const Tensor& parameter(const std::string& name) const { return weights_.parameter(name); }
  Tensor optional(const std::string& name) const;
  io::ModelWeights weights_;
};

}  // namespace moetune::model
