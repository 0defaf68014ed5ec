#include "moetune/model/families/latent_attention.h"

#include <fmt/format.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// RoPE over qk_rope_head_dim. read_decoder_config reads the schedule (ops::RopeSpec: default, linear, llama3, yarn);
// DeepSeek adds its own rules: a yarn dict without a factor takes max_position_embeddings /
// original_max_position_embeddings (as transformers does for DeepSeek-style configs); cos and sin are multiplied
// by the schedule's attention scaling (YaRN's; 1 for the others); for any type but default the softmax scale grows
// by mscale(factor, mscale_all_dim)² when mscale_all_dim is set (yarn_apply_mscale, whatever the type).
void read_mla_rope(const io::ConfigReader& r, int64_t max_position_embeddings, AttentionSpec& a) {
  MlaSpec& mla = *a.mla;
  const char* key = rope_dict_key(r);
  const double head_scale = 1.0 / std::sqrt(double(a.qk_head_dim));
  if (a.rope.type == "default") {
    mla.softmax_scale = head_scale;
    return;
  }
  const json* found = r.find(key);
  const json dict = found && found->is_object() ? *found : json::object();
  const io::ConfigReader rope(dict);  // holds a reference: `dict` outlives it
  if (a.rope.type == "yarn" && !rope.has("factor"))
    a.rope.factor = double(max_position_embeddings) / double(a.rope.original_max_position_embeddings);
  mla.rope_scale = ops::rope_attention_scaling(a.rope);
  // Python truthiness: a zero mscale_all_dim counts as absent; transformers reads the dict's own factor here.
  const double all_dim = a.rope.mscale_all_dim;
  const double m = all_dim != 0.0 ? ops::yarn_mscale(rope.number("factor", 0.0), all_dim) : 1.0;
  mla.softmax_scale = head_scale * m * m;
}

}  // namespace

AttentionSpec read_latent_attention(const io::ConfigReader& r, const DecoderConfig& c,
                                    const LatentAttentionDefaults& d) {
  AttentionSpec a = c.attention;
  // MLA makes a key and a value per head whatever num_key_value_heads says (read_decoder_config: absent 128,
  // transformers' default; null the heads); transformers still repeats them heads // num_key_value_heads times,
  // which only works out when that is at most 1 (0 too: its sdpa path repeats only above 1).
  if (a.num_heads / a.num_kv_heads > 1)
    refuse("num_key_value_heads", std::to_string(a.num_kv_heads),
           fmt::format("MLA with {} heads sharing each key/value head", a.num_heads / a.num_kv_heads));
  a.num_kv_heads = a.num_heads;
  MlaSpec mla;
  if (r.has("q_lora_rank"))
    mla.q_lora_rank = r.integer("q_lora_rank", d.q_lora_rank);
  else if (!r.object().contains("q_lora_rank"))
    mla.q_lora_rank = d.q_lora_rank;  // absent: the default; null: q_proj
  mla.kv_lora_rank = r.integer("kv_lora_rank", d.kv_lora_rank);
  mla.qk_nope_head_dim = r.integer("qk_nope_head_dim", d.qk_nope_head_dim);
  mla.qk_rope_head_dim = r.integer("qk_rope_head_dim", d.qk_rope_head_dim);
  mla.rope_interleave = r.truthy("rope_interleave", true);  // `bool | None`: null is plain rotate-half
  mla.bias = r.boolean("attention_bias", false);
  const std::pair<const char*, int64_t> widths[] = {{"kv_lora_rank", mla.kv_lora_rank},
                                                    {"qk_nope_head_dim", mla.qk_nope_head_dim},
                                                    {"qk_rope_head_dim", mla.qk_rope_head_dim},
                                                    {"q_lora_rank", mla.q_lora_rank.value_or(1)}};
  for (const auto& [key, value] : widths)
    if (value <= 0 || value > (1 << 20)) fail("'{}' must be positive and at most {}, got {}", key, 1 << 20, value);
  if (mla.qk_rope_head_dim % 2 != 0) fail("'qk_rope_head_dim' must be even for RoPE, got {}", mla.qk_rope_head_dim);
  a.qk_head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  a.v_head_dim = r.integer("v_head_dim", d.v_head_dim);
  if (a.v_head_dim <= 0) fail("'v_head_dim' must be positive, got {}", a.v_head_dim);
  a.qkv_bias = a.o_bias = mla.bias;
  a.mla = mla;
  read_mla_rope(r, c.spec.max_position_embeddings, a);
  return a;
}

void accept_fp8_quantization_only(const io::ConfigReader& r) {
  if (const json* q = r.find("quantization_config")) {
    const bool fp8 = q->is_object() && q->value("quant_method", std::string()) == "fp8" &&
                     q->value("fmt", std::string("e4m3")) == "e4m3";
    if (!fp8)
      refuse("quantization_config", q->is_object() ? q->value("quant_method", std::string("?")) : q->dump(),
             "a quantisation other than FP8 e4m3 block-scaled");
  }
}

namespace {

ParameterSpec whole(std::string name, ParameterRole role, HfTensor piece) {
  return {std::move(name), piece.shape, role, {piece}, "", shape_numel(piece.shape)};
}

// MLA's tensors for one layer, in transformers' module order.
std::vector<ParameterSpec> mla_parameters(const ModelSpec& spec, const AttentionSpec& a, const std::string& hf,
                                          const std::string& engine) {
  const MlaSpec& mla = *a.mla;
  const int64_t H = spec.hidden_size, heads = a.num_heads, rope = mla.qk_rope_head_dim, latent = mla.kv_lora_rank;
  const std::string in = hf + "self_attn.", out = engine + "attn.";
  std::vector<ParameterSpec> p;
  if (!mla.q_lora_rank) {
    p.push_back(whole(out + "q", ParameterRole::Matmul, {in + "q_proj.weight", {heads * a.qk_head_dim, H}}));
  } else {
    const int64_t rank = *mla.q_lora_rank;
    p.push_back(whole(out + "q_a", ParameterRole::Matmul, {in + "q_a_proj.weight", {rank, H}}));
    if (mla.bias) p.push_back(whole(out + "q_a_bias", ParameterRole::Bias, {in + "q_a_proj.bias", {rank}}));
    p.push_back(whole(out + "q_a_norm", ParameterRole::Norm, {in + "q_a_layernorm.weight", {rank}}));
    p.push_back(whole(out + "q_b", ParameterRole::Matmul, {in + "q_b_proj.weight", {heads * a.qk_head_dim, rank}}));
  }
  p.push_back(whole(out + "kv_a", ParameterRole::Matmul, {in + "kv_a_proj_with_mqa.weight", {latent + rope, H}}));
  if (mla.bias)
    p.push_back(whole(out + "kv_a_bias", ParameterRole::Bias, {in + "kv_a_proj_with_mqa.bias", {latent + rope}}));
  p.push_back(whole(out + "kv_a_norm", ParameterRole::Norm, {in + "kv_a_layernorm.weight", {latent}}));
  p.push_back(whole(out + "kv_b", ParameterRole::Matmul,
                    {in + "kv_b_proj.weight", {heads * (mla.qk_nope_head_dim + a.v_head_dim), latent}}));
  p.push_back(whole(out + "o", ParameterRole::Matmul, {in + "o_proj.weight", {H, heads * a.v_head_dim}}));
  if (mla.bias) p.push_back(whole(out + "o_bias", ParameterRole::Bias, {in + "o_proj.bias", {H}}));
  return p;
}

}  // namespace

std::vector<ParameterSpec> latent_attention_decoder_parameters(const ModelSpec& spec) {
  std::vector<ParameterSpec> out;
  for (ParameterSpec& p : shared_experts_decoder_parameters(spec)) {
    int64_t layer = -1;
    char kind[16] = {};
    if (std::sscanf(p.name.c_str(), "layers.%" SCNd64 ".%15[a-z]", &layer, kind) == 2 && std::string(kind) == "attn") {
      if (p.name != fmt::format("layers.{}.attn.qkv", layer)) continue;  // the rest of the q/k/v attention
      const std::string hf = fmt::format("model.layers.{}.", layer), engine = fmt::format("layers.{}.", layer);
      for (ParameterSpec& mla : mla_parameters(spec, *spec.layers[size_t(layer)].sublayers[0].attention(), hf, engine))
        out.push_back(std::move(mla));
      continue;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace moetune::model
