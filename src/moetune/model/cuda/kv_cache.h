// The GPU engine's decode cache: per attention sublayer, the rotated keys and the values of every token of the
// sequence so far, bf16 [capacity, kv_heads, key width] and [capacity, kv_heads, value width] (multi-head latent
// attention holds one row a token instead, [normed latent | rotated rope key], or with adapters on kv_b each head's
// expanded k and v, of different widths), allocated once (at the sublayer's
// first pass) for the whole generation, so that a new token writes its row in place instead of growing a buffer (a copy
// of the whole cache per token). The attention block's q/k-norm + RoPE kernel writes the new tokens' k and v straight
// into their rows.
#pragma once

#include <utility>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/decode_cache.h"

namespace moetune::model::cuda {

class KvCache final : public DecodeCache {
 public:
  explicit KvCache(int64_t capacity) : capacity_(capacity) {}
  int64_t tokens() const override { return tokens_; }
  int64_t capacity() const { return capacity_; }
  // Before a forward pass over `count` new tokens (fails when they do not fit); the attention sublayers then take
  // their buffers in walk order.
  void start_pass(int64_t count);
  // After it: the new tokens are part of the sequence.
  void finish_pass() { tokens_ += pending_; }
  // The next attention sublayer's key and value buffers, [capacity, kv_heads, key_width] and [capacity, kv_heads,
  // value_width]: rows [0, tokens()) hold the sequence so far, the pass writes rows [tokens(), tokens() + count).
  // value_width 0: keys only, the values undefined (latent MLA's rows hold both: mla_attention_block_cached.cpp).
  std::pair<Tensor, Tensor> next_layer(int64_t kv_heads, int64_t key_width, int64_t value_width);
  // The next recurrent sublayer's state (Mamba2's, a Gated DeltaNet's), zeros at the sequence's start: its conv
  // window (BF16 [conv_kernel − 1, conv channels], the last rows of the conv's input, oldest first) and its recurrent
  // state (F32: Mamba2's SSM state [heads, head_dim, state], the delta rule's [Hv, Dk, Dv]). A pass moves both on to
  // the end of its tokens (ops/cuda/mamba2_step.h, ops/cuda/gated_delta_rule.h).
  std::pair<Tensor, Tensor> next_recurrent_layer(const Shape& conv_window, const Shape& state);
  size_t bytes() const;  // allocated so far

 private:
  std::vector<std::pair<Tensor, Tensor>> layers_;  // per attention sublayer, in walk order
  std::vector<std::pair<Tensor, Tensor>> recurrent_layers_;  // per recurrent sublayer, in walk order
  size_t next_ = 0, next_recurrent_ = 0;
  int64_t capacity_ = 0, tokens_ = 0, pending_ = 0;
};

}  // namespace moetune::model::cuda
