// The keys and values of the tokens a generation has run so far, per attention sublayer, so that each new token
// runs the model on itself alone: the CPU engine's decode cache (the GPU's is model/cuda/kv_cache.h). Recurrent
// sublayers (Mamba2, Gated DeltaNet) keep their state instead: a conv window and a recurrent state, continued by each
// pass.
#pragma once

#include <utility>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/decode_cache.h"
#include "moetune/ops/attention.h"

namespace moetune::model {

class KvCache final : public DecodeCache {
 public:
  int64_t tokens() const override { return tokens_; }
  // Before a forward pass over `count` new tokens: the attention sublayers take their entries in walk order.
  void start_pass(int64_t count) {
    next_ = next_recurrent_ = 0;
    pending_ = count;
  }
  // After it: the new tokens are part of the sequence.
  void finish_pass() { tokens_ += pending_; }
  // The sublayer the walk is at appends its new keys and values k, v [n, heads, d] and gets those of the whole
  // sequence, [tokens() + n, heads, d].
  std::pair<Tensor, Tensor> append(const Tensor& k, const Tensor& v);
  // The recurrent sublayer the walk is at: its conv window (F32 [conv_kernel − 1, conv channels], the last rows of
  // the conv's input, oldest first; zeros at the sequence's start) and recurrent state (Mamba2's SSM state F32
  // [heads, head_dim, state], a Gated DeltaNet's [value heads, Dk, Dv]), which its pass moves on to the pass's last
  // token (mamba2_mixer_step, gated_delta_mixer_step).
  std::pair<Tensor, Tensor> recurrent_state(const Shape& conv_window, const Shape& state);
  // Every key of the sequence is visible (one document, no padding); the causal limit is the op's.
  ops::AttentionMask mask() const { return {std::vector<int64_t>(size_t(tokens_ + pending_), 0), {}}; }

 private:
  std::vector<std::pair<Tensor, Tensor>> layers_;  // per attention sublayer, in walk order
  std::vector<std::pair<Tensor, Tensor>> recurrent_;  // per recurrent sublayer, in walk order
  size_t next_ = 0, next_recurrent_ = 0;
  int64_t tokens_ = 0, pending_ = 0;
};

// q's causal attention over k, v (ops::causal_attention_forward); with a cache, over the keys and values of the
// whole sequence, k and v appended to it first.
Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, double scale,
                         const ops::AttentionVariant& variant, KvCache* cache);

}  // namespace moetune::model
