// NemotronHForCausalLM (NVIDIA Nemotron-H, Nemotron 3 Nano / Super): one mixer per layer, each with its own
// pre-norm and residual, as layers_block_type (or hybrid_override_pattern) lists them: Mamba2
// (model/mamba2_block.h), attention with GQA and no RoPE, a relu² MLP without a gate, or an MoE with DeepSeek-V3's
// sigmoid group-limited router, relu² experts (inside a latent width when moe_latent_size is set) and a relu²
// shared expert added unscaled. No aux loss. lm_head is never tied (transformers 5.17 declares no tied weights).
// Multi-token-prediction tensors (mtp.*) are skipped on load and not saved, as transformers does.
// config.json is read by nemotron_h_config.h; docs/families/hf-nemotron-h.md has what was checked.
//
// Engine names under layers.N.: "norm" (each layer's one pre-norm); mamba.{in_proj, conv, conv_bias, dt_bias,
// a_log, d, norm, out_proj} (conv keeps conv1d's [C, 1, K]); attn.{qkv, o}; mlp.{gate_up, down} with gate_up
// holding up_proj alone (relu² has no gate); moe.{router, router_correction_bias, experts_gate_up [E, I, D]
// (each expert's up_proj), experts_down [E, D, I], shared_gate_up, shared_down, latent_in, latent_out}.
#include <fmt/format.h>

#include <utility>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/nemotron_h_config.h"

namespace moetune::model {
namespace {

ParameterSpec whole(std::string name, ParameterRole role, HfTensor piece) {
  return {std::move(name), piece.shape, role, {piece}, "", shape_numel(piece.shape)};
}

AttentionSpec read_attention(const NemotronHConfig& c) {
  AttentionSpec a;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.qk_head_dim = a.v_head_dim = c.head_dim;
  a.rope.type = "none";  // NemotronHAttention has no positional embedding
  return a;
}

MoeSpec read_moe(const NemotronHConfig& c) {
  MoeSpec moe;
  RouterSpec& router = moe.router;
  router.num_experts = c.num_experts;
  router.top_k = c.top_k;
  router.score = RouterScore::Sigmoid;
  router.num_groups = c.num_groups;
  router.topk_groups = c.topk_groups;
  router.correction_bias = true;
  router.renormalize = c.norm_topk_prob;
  router.scaling_factor = c.routed_scaling_factor;
  if (c.num_experts / c.num_groups < 2 && c.num_groups > 1)
    fail("config.json: 'n_group' ({}) must divide 'n_routed_experts' ({}) into groups of at least 2 (groups rank by "
         "their top-2)",
         c.num_groups, c.num_experts);
  moe.experts = relu2_mlp(c.moe_intermediate_size, /*bias=*/false);  // NemotronHExperts have no biases
  moe.shared_expert = SharedExpertSpec{relu2_mlp(c.shared_intermediate_size, c.mlp_bias), /*sigmoid_gate=*/false};
  moe.latent_size = c.moe_latent_size;
  return moe;
}

// Sizes beyond these are typos or hostile files, not models (validate_decoder checks the MoE's).
void check_sizes(const NemotronHConfig& c) {
  constexpr int64_t kMaxWidth = 1 << 20, kMaxVocab = int64_t(1) << 26, kMaxLayers = 1 << 12;
  const std::pair<const char*, int64_t> widths[] = {
      {"hidden_size", c.hidden_size},         {"mamba_num_heads", c.mamba.num_heads}, {"mamba_head_dim", c.mamba.head_dim},
      {"n_groups", c.mamba.num_groups},       {"ssm_state_size", c.mamba.state_size}, {"conv_kernel", c.mamba.conv_kernel},
      {"num_attention_heads", c.num_heads},   {"head_dim", c.head_dim},               {"intermediate_size", c.intermediate_size},
      {"moe_latent_size", c.moe_latent_size.value_or(1)}, {"moe_shared_expert_intermediate_size", c.shared_intermediate_size}};
  for (const auto& [key, value] : widths)
    if (value <= 0 || value > kMaxWidth) fail("config.json: '{}' must be positive and at most {}, got {}", key, kMaxWidth, value);
  if (c.vocab_size > kMaxVocab) fail("config.json: 'vocab_size' is {}, more than moetune accepts ({})", c.vocab_size, kMaxVocab);
  if (int64_t(c.layers.size()) > kMaxLayers)
    fail("config.json: the layer pattern has {} layers, more than moetune accepts ({})", c.layers.size(), kMaxLayers);
}

ModelSpec describe(const io::ConfigReader& r) {
  const NemotronHConfig c = read_nemotron_h_config(r);
  check_sizes(c);
  ModelSpec spec;
  read_dtype_and_token_ids(r, spec);
  spec.max_position_embeddings = r.integer("max_position_embeddings", 4096);
  spec.vocab_size = c.vocab_size;
  spec.hidden_size = c.hidden_size;
  spec.norm_eps = c.norm_eps;
  spec.tie_word_embeddings = false;  // never tied in transformers 5.17, whatever config.json says
  spec.carries_mtp_layers = true;    // mtp.*: not loaded, trained or saved
  // backbone.* on disk, model.* in transformers' model (conversion_mapping.py): PEFT's adapters say model.*.
  spec.checkpoint_names.decoder = "backbone.";
  Mamba2Spec mamba = c.mamba;
  mamba.chunk_size = c.chunk_size;
  for (NemotronHLayer kind : c.layers) {
    SublayerSpec sublayer{"norm", MlpSpec{}};
    switch (kind) {
      case NemotronHLayer::Mamba2: sublayer.mixer = mamba; break;
      case NemotronHLayer::Attention: sublayer.mixer = read_attention(c); break;
      case NemotronHLayer::Mlp: sublayer.mixer = relu2_mlp(c.intermediate_size, c.mlp_bias); break;
      case NemotronHLayer::Moe: sublayer.mixer = read_moe(c); break;
    }
    spec.layers.push_back(LayerSpec{{std::move(sublayer)}});
  }
  validate_decoder(spec);
  return spec;
}

struct Builder {
  const ModelSpec& spec;
  std::vector<ParameterSpec> out;

  void add(std::string name, ParameterRole role, HfTensor piece) { out.push_back(whole(std::move(name), role, std::move(piece))); }

  void attention(const AttentionSpec& a, const std::string& hf, const std::string& engine) {
    const int64_t H = spec.hidden_size, q = a.num_heads * a.qk_head_dim, kv = a.num_kv_heads * a.qk_head_dim;
    std::vector<HfTensor> pieces = {{hf + "q_proj.weight", {q, H}}, {hf + "k_proj.weight", {kv, H}}, {hf + "v_proj.weight", {kv, H}}};
    out.push_back({engine + "qkv", {q + 2 * kv, H}, ParameterRole::Matmul, std::move(pieces), "", (q + 2 * kv) * H});
    add(engine + "o", ParameterRole::Matmul, {hf + "o_proj.weight", {H, q}});
  }

  // A relu² MLP: up_proj (the engine's gate_up) and down_proj, biases with mlp_bias.
  void relu2(const MlpSpec& m, const std::string& hf, const std::string& engine) {
    const int64_t H = spec.hidden_size, I = m.intermediate;
    add(engine + "gate_up", ParameterRole::Matmul, {hf + "up_proj.weight", {I, H}});
    if (m.bias) add(engine + "gate_up_bias", ParameterRole::Bias, {hf + "up_proj.bias", {I}});
    add(engine + "down", ParameterRole::Matmul, {hf + "down_proj.weight", {H, I}});
    if (m.bias) add(engine + "down_bias", ParameterRole::Bias, {hf + "down_proj.bias", {H}});
  }

  void moe(const MoeSpec& m, const std::string& hf, const std::string& engine) {
    const int64_t H = spec.hidden_size, E = m.router.num_experts, I = m.experts.intermediate, k = m.router.top_k;
    const int64_t D = m.expert_width(H);
    add(engine + "router", ParameterRole::Router, {hf + "gate.weight", {E, H}});
    out.push_back(correction_bias_buffer(engine + "router_correction_bias", hf + "gate.e_score_correction_bias", E));
    // transformers stacks them in memory as mixer.experts.up_proj / down_proj, this layout; on disk they are
    // per expert (save_pretrained unstacks them), and a folder holding the stacked tensors loads too.
    ParameterSpec up{engine + "experts_gate_up", {E, I, D}, ParameterRole::Experts, {}, hf + "experts.up_proj", k * I * D};
    ParameterSpec down{engine + "experts_down", {E, D, I}, ParameterRole::Experts, {}, hf + "experts.down_proj", k * D * I};
    for (int64_t e = 0; e < E; ++e) {
      const std::string expert = fmt::format("{}experts.{}.", hf, e);
      up.pieces.push_back({expert + "up_proj.weight", {I, D}});
      down.pieces.push_back({expert + "down_proj.weight", {D, I}});
    }
    up.placement = down.placement = Placement::ExpertSharded;
    out.push_back(std::move(up));
    out.push_back(std::move(down));
    relu2(m.shared_expert->mlp, hf + "shared_experts.", engine + "shared_");
    if (!m.latent_size) return;
    const bool bias_on = m.shared_expert->mlp.bias;  // mlp_bias, as for the shared expert
    add(engine + "latent_in", ParameterRole::Matmul, {hf + "fc1_latent_proj.weight", {D, H}});
    if (bias_on) add(engine + "latent_in_bias", ParameterRole::Bias, {hf + "fc1_latent_proj.bias", {D}});
    add(engine + "latent_out", ParameterRole::Matmul, {hf + "fc2_latent_proj.weight", {H, D}});
    if (bias_on) add(engine + "latent_out_bias", ParameterRole::Bias, {hf + "fc2_latent_proj.bias", {H}});
  }
};

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  Builder b{spec, {}};
  const int64_t H = spec.hidden_size;
  b.add("embed_tokens", ParameterRole::Embedding, {"backbone.embeddings.weight", {spec.vocab_size, H}});
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer) {
    const std::string hf = fmt::format("backbone.layers.{}.", layer), engine = fmt::format("layers.{}.", layer);
    const SublayerSpec& sublayer = spec.layers[size_t(layer)].sublayers[0];
    b.add(engine + sublayer.norm, ParameterRole::Norm, {hf + "norm.weight", {H}});
    const std::string mixer = hf + "mixer.";
    if (const Mamba2Spec* m = sublayer.mamba2()) append_mamba2_parameters(*m, H, mixer, engine + "mamba.", b.out);
    if (const AttentionSpec* a = sublayer.attention()) b.attention(*a, mixer, engine + "attn.");
    if (const MlpSpec* m = sublayer.mlp()) b.relu2(*m, mixer, engine + "mlp.");
    if (const MoeSpec* m = sublayer.moe()) b.moe(*m, mixer, engine + "moe.");
  }
  b.add("final_norm", ParameterRole::Norm, {"backbone.norm_f.weight", {H}});
  b.add("lm_head", ParameterRole::LmHead, {"lm_head.weight", {spec.vocab_size, H}});
  return b.out;
}

}  // namespace

extern const Family kNemotronHFamily{"NemotronHForCausalLM", "nemotron_h", describe, parameters};

}  // namespace moetune::model
