#include "moetune/model/parameter_layout.h"

namespace moetune::model {
namespace {

ParameterSpec whole(std::string name, ParameterRole role, HfTensor piece) {
  ParameterSpec spec{std::move(name), piece.shape, role, {piece}, "", shape_numel(piece.shape)};
  return spec;
}

// Pieces with equal trailing dimensions, concatenated along dim 0.
ParameterSpec concatenated(std::string name, ParameterRole role, std::vector<HfTensor> pieces) {
  Shape shape = pieces[0].shape;
  shape[0] = 0;
  for (const auto& piece : pieces) shape[0] += piece.shape[0];
  ParameterSpec spec{std::move(name), shape, role, std::move(pieces), "", shape_numel(shape)};
  return spec;
}

void add_attention(ParameterLayout& layout, const io::ModelConfig& c, const std::string& hf, const std::string& engine) {
  const int64_t q_rows = c.num_attention_heads * c.head_dim, kv_rows = c.num_key_value_heads * c.head_dim;
  const std::string attn = hf + "self_attn.";
  layout.parameters.push_back(concatenated(engine + "attn.qkv", ParameterRole::Matmul,
                                           {{attn + "q_proj.weight", {q_rows, c.hidden_size}},
                                            {attn + "k_proj.weight", {kv_rows, c.hidden_size}},
                                            {attn + "v_proj.weight", {kv_rows, c.hidden_size}}}));
  if (c.attention_bias)
    layout.parameters.push_back(concatenated(engine + "attn.qkv_bias", ParameterRole::Bias,
                                             {{attn + "q_proj.bias", {q_rows}},
                                              {attn + "k_proj.bias", {kv_rows}},
                                              {attn + "v_proj.bias", {kv_rows}}}));
  if (c.qk_norm) {
    layout.parameters.push_back(whole(engine + "attn.q_norm", ParameterRole::Norm, {attn + "q_norm.weight", {c.head_dim}}));
    layout.parameters.push_back(whole(engine + "attn.k_norm", ParameterRole::Norm, {attn + "k_norm.weight", {c.head_dim}}));
  }
  layout.parameters.push_back(
      whole(engine + "attn.o", ParameterRole::Matmul, {attn + "o_proj.weight", {c.hidden_size, q_rows}}));
  if (c.attention_bias)
    layout.parameters.push_back(whole(engine + "attn.o_bias", ParameterRole::Bias, {attn + "o_proj.bias", {c.hidden_size}}));
}

void add_dense_mlp(ParameterLayout& layout, const io::ModelConfig& c, const std::string& hf, const std::string& engine) {
  const int64_t inner = c.intermediate_size;
  const std::string mlp = hf + "mlp.";
  layout.parameters.push_back(concatenated(engine + "mlp.gate_up", ParameterRole::Matmul,
                                           {{mlp + "gate_proj.weight", {inner, c.hidden_size}},
                                            {mlp + "up_proj.weight", {inner, c.hidden_size}}}));
  if (c.mlp_bias)
    layout.parameters.push_back(concatenated(engine + "mlp.gate_up_bias", ParameterRole::Bias,
                                             {{mlp + "gate_proj.bias", {inner}}, {mlp + "up_proj.bias", {inner}}}));
  layout.parameters.push_back(
      whole(engine + "mlp.down", ParameterRole::Matmul, {mlp + "down_proj.weight", {c.hidden_size, inner}}));
  if (c.mlp_bias)
    layout.parameters.push_back(whole(engine + "mlp.down_bias", ParameterRole::Bias, {mlp + "down_proj.bias", {c.hidden_size}}));
}

void add_moe(ParameterLayout& layout, const io::ModelConfig& c, const std::string& hf, const std::string& engine) {
  const int64_t experts = c.num_experts, inner = c.moe_intermediate_size, hidden = c.hidden_size;
  const std::string mlp = hf + "mlp.";
  layout.parameters.push_back(whole(engine + "moe.router", ParameterRole::Router, {mlp + "gate.weight", {experts, hidden}}));
  ParameterSpec gate_up{engine + "moe.experts_gate_up", {experts, 2 * inner, hidden}, ParameterRole::Experts, {},
                        mlp + "experts.gate_up_proj", c.num_experts_per_tok * 2 * inner * hidden};
  ParameterSpec down{engine + "moe.experts_down", {experts, hidden, inner}, ParameterRole::Experts, {},
                     mlp + "experts.down_proj", c.num_experts_per_tok * hidden * inner};
  for (int64_t e = 0; e < experts; ++e) {
    const std::string expert = fmt::format("{}experts.{}.", mlp, e);
    gate_up.pieces.push_back({expert + "gate_proj.weight", {inner, hidden}});
    gate_up.pieces.push_back({expert + "up_proj.weight", {inner, hidden}});
    down.pieces.push_back({expert + "down_proj.weight", {hidden, inner}});
  }
  layout.parameters.push_back(std::move(gate_up));
  layout.parameters.push_back(std::move(down));
}

}  // namespace

ParameterLayout parameter_layout(const io::ModelConfig& c) {
  ParameterLayout layout{c, {}};
  const int64_t hidden = c.hidden_size;
  layout.parameters.push_back(
      whole("embed_tokens", ParameterRole::Embedding, {"model.embed_tokens.weight", {c.vocab_size, hidden}}));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string hf = fmt::format("model.layers.{}.", layer), engine = fmt::format("layers.{}.", layer);
    layout.parameters.push_back(
        whole(engine + "input_norm", ParameterRole::Norm, {hf + "input_layernorm.weight", {hidden}}));
    add_attention(layout, c, hf, engine);
    layout.parameters.push_back(
        whole(engine + "post_attn_norm", ParameterRole::Norm, {hf + "post_attention_layernorm.weight", {hidden}}));
    if (c.is_moe_layer(layer))
      add_moe(layout, c, hf, engine);
    else
      add_dense_mlp(layout, c, hf, engine);
  }
  layout.parameters.push_back(whole("final_norm", ParameterRole::Norm, {"model.norm.weight", {hidden}}));
  if (!c.tie_word_embeddings)
    layout.parameters.push_back(whole("lm_head", ParameterRole::LmHead, {"lm_head.weight", {c.vocab_size, hidden}}));
  return layout;
}

int64_t ParameterLayout::total_parameters() const {
  int64_t total = 0;
  for (const auto& p : parameters) total += shape_numel(p.shape);
  return total;
}

int64_t ParameterLayout::active_parameters() const {
  int64_t active = 0;
  for (const auto& p : parameters) active += p.active_numel;
  return active;
}

int64_t ParameterLayout::active_matmul_parameters() const {
  int64_t active = 0;
  for (const auto& p : parameters) {
    bool matmul = p.role == ParameterRole::Matmul || p.role == ParameterRole::Router ||
                  p.role == ParameterRole::Experts || p.role == ParameterRole::LmHead ||
                  (p.role == ParameterRole::Embedding && config.tie_word_embeddings);  // it is the LM head too
    if (matmul) active += p.active_numel;
  }
  return active;
}

}  // namespace moetune::model
