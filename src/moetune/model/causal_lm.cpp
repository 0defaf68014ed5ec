#include "moetune/model/causal_lm.h"

#include <cmath>

#include "moetune/ops/attention.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/moe.h"
#include "moetune/ops/norm.h"
#include "moetune/ops/rope.h"

namespace moetune::model {
namespace {

// Columns [first, first + count) of a [T, C] tensor, as a new [T, count] tensor.
Tensor columns(const Tensor& x, int64_t first, int64_t count) {
  const int64_t rows = x.size(0), width = x.size(1);
  Tensor out = Tensor::empty({rows, count}, DType::F32);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(x.data<float>() + r * width + first, count, out.data<float>() + r * count);
  return out;
}

void add_into(Tensor& sum, const Tensor& term) {
  float* s = sum.data<float>();
  const float* t = term.data<float>();
  for (int64_t i = 0; i < sum.numel(); ++i) s[i] += t[i];
}

}  // namespace

CausalLM CausalLM::from_pretrained(const std::filesystem::path& folder) {
  return CausalLM(io::load_checkpoint(folder, io::LoadOptions{DType::F32}));
}

Tensor CausalLM::optional(const std::string& name) const {
  const Tensor* found = weights_.find(name);
  return found ? *found : Tensor();
}

Tensor CausalLM::forward(const Tensor& input_ids, const Tensor& position_ids) const {
  const io::ModelConfig& c = config();
  MOETUNE_CHECK(input_ids.dim() == 2 && input_ids.dtype() == DType::I64, "forward: input_ids must be I64 [B, S], got {}",
                input_ids.str());
  const int64_t batch = input_ids.size(0), seq = input_ids.size(1), tokens = batch * seq, hidden = c.hidden_size;
  const int64_t hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;

  std::vector<int64_t> positions(static_cast<size_t>(tokens)), document_start(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    positions[size_t(t)] = position_ids.defined() ? position_ids.data<int64_t>()[t] : t % seq;
    const bool starts = t % seq == 0 || positions[size_t(t)] != positions[size_t(t - 1)] + 1;
    document_start[size_t(t)] = starts ? t : document_start[size_t(t - 1)];
  }

  const Tensor& embedding = parameter("embed_tokens");
  Tensor h = Tensor::empty({tokens, hidden}, DType::F32);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = input_ids.data<int64_t>()[t];
    MOETUNE_CHECK(id >= 0 && id < c.vocab_size, "forward: token id {} at position {} is outside the vocabulary of {}",
                  id, t, c.vocab_size);
    std::copy_n(embedding.data<float>() + id * hidden, hidden, h.data<float>() + t * hidden);
  }

  const std::vector<float> inverse_frequencies = ops::rope_inverse_frequencies(c.rope, hd);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = fmt::format("layers.{}.", layer);
    Tensor x = ops::rms_norm(h, parameter(p + "input_norm"), c.rms_norm_eps);
    Tensor qkv = ops::linear(x, parameter(p + "attn.qkv"), optional(p + "attn.qkv_bias"));
    Tensor q = columns(qkv, 0, nq * hd).view({tokens, nq, hd});
    Tensor k = columns(qkv, nq * hd, nkv * hd).view({tokens, nkv, hd});
    Tensor v = columns(qkv, (nq + nkv) * hd, nkv * hd).view({tokens, nkv, hd});
    if (c.qk_norm) {
      q = ops::rms_norm(q, parameter(p + "attn.q_norm"), c.rms_norm_eps);
      k = ops::rms_norm(k, parameter(p + "attn.k_norm"), c.rms_norm_eps);
    }
    ops::apply_rope(q, inverse_frequencies, positions);
    ops::apply_rope(k, inverse_frequencies, positions);
    Tensor attended = ops::causal_attention(q, k, v, document_start, 1.0 / std::sqrt(double(hd)));
    add_into(h, ops::linear(attended.view({tokens, nq * hd}), parameter(p + "attn.o"), optional(p + "attn.o_bias")));

    x = ops::rms_norm(h, parameter(p + "post_attn_norm"), c.rms_norm_eps);
    if (c.is_moe_layer(layer)) {
      ops::Routing routing = ops::route_softmax_topk(x, parameter(p + "moe.router"), c.num_experts_per_tok, c.norm_topk_prob);
      add_into(h, ops::moe_experts(x, routing, parameter(p + "moe.experts_gate_up"), parameter(p + "moe.experts_down")));
    } else {
      Tensor inner = ops::swiglu(ops::linear(x, parameter(p + "mlp.gate_up"), optional(p + "mlp.gate_up_bias")));
      add_into(h, ops::linear(inner, parameter(p + "mlp.down"), optional(p + "mlp.down_bias")));
    }
  }
  Tensor final_hidden = ops::rms_norm(h, parameter("final_norm"), c.rms_norm_eps);
  const Tensor& head = c.tie_word_embeddings ? embedding : parameter("lm_head");
  return ops::linear(final_hidden, head).view({batch, seq, c.vocab_size});
}

}  // namespace moetune::model
