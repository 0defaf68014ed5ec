// config.json -> the model description, through each family: transformers' defaults and spellings (v4 and v5),
// the layer pattern, errors that name the key, and refusals of what the engine does not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "moetune/core/error.h"
#include "moetune/model/model_description.h"
#include "moetune/model/sequence_layout.h"
#include "moetune/ops/rope.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using nlohmann::json;

ModelSpec parse(const std::string& text) { return describe_model(json::parse(text), "config.json"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const AttentionSpec& attention(const ModelSpec& spec, size_t layer = 0) { return *spec.layers[layer].sublayers[0].attention(); }

// Qwen3-30B-A3B's config.json as transformers v4 wrote it.
const char* kQwen3MoeV4 = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
  "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
  "decoder_sparse_step": 1, "norm_topk_prob": true, "router_aux_loss_coef": 0.001, "rope_theta": 1000000.0,
  "rope_scaling": null, "rms_norm_eps": 1e-06, "max_position_embeddings": 40960, "vocab_size": 151936,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "mlp_only_layers": [], "use_sliding_window": false,
  "sliding_window": null, "max_window_layers": 48, "bos_token_id": 151643, "eos_token_id": 151645})";

TEST(Families, Qwen3MoeV4Spelling) {
  ModelSpec c = parse(kQwen3MoeV4);
  EXPECT_EQ(c.family, "qwen3_moe");
  EXPECT_EQ(c.num_experts(), 128);
  EXPECT_EQ(attention(c).rope.theta, 1e6);
  EXPECT_EQ(attention(c).rope.type, "default");
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_TRUE(c.layers[0].moe()->router.renormalize);
  EXPECT_TRUE(attention(c).qk_norm);
  EXPECT_FALSE(attention(c).sliding_window.has_value());
  EXPECT_EQ(c.moe_layer_count(), 48);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.aux_loss, AuxLoss::LoadBalancing);
  EXPECT_FALSE(c.aux_loss_by_default);
}

TEST(Families, Qwen3MoeV5Spelling) {
  ModelSpec c = parse(R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":64,"num_hidden_layers":4,
    "num_attention_heads":4,"num_local_experts":16,"rope_parameters":{"rope_type":"default","rope_theta":5000.0},
    "dtype":"float32","mlp_only_layers":[2],"decoder_sparse_step":1})");
  EXPECT_EQ(c.num_experts(), 16);
  EXPECT_EQ(attention(c).rope.theta, 5000.0);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(attention(c).qk_head_dim, 16);  // Qwen3-MoE's default: hidden / heads
  EXPECT_EQ(attention(c).num_kv_heads, 4);  // Qwen3MoeConfig's default
  EXPECT_NE(c.layers[1].moe(), nullptr);
  EXPECT_EQ(c.layers[2].moe(), nullptr);
}

TEST(Families, DecoderSparseStep) {
  ModelSpec c = parse(R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
    "num_experts":4,"num_experts_per_tok":2,"decoder_sparse_step":2})");
  EXPECT_EQ(c.layers[0].moe(), nullptr);
  EXPECT_NE(c.layers[1].moe(), nullptr);
  EXPECT_EQ(c.layers[2].moe(), nullptr);
  EXPECT_NE(c.layers[3].moe(), nullptr);
}

TEST(Families, Qwen3Defaults) {
  // use_sliding_window with max_window_layers (28 by default) beyond the layers: Qwen3Config slides no layer.
  ModelSpec c = parse(R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":true,"use_sliding_window":true})");
  EXPECT_EQ(attention(c).qk_head_dim, 128);  // Qwen3Config's default is 128, not hidden / heads
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(attention(c).sliding_window.has_value());
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_FALSE(c.is_moe());
}

TEST(Families, LlamaV4RopeScalingAndDefaults) {
  ModelSpec c = parse(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":8,"num_key_value_heads":null,"rope_theta":500000.0,
    "rope_scaling":{"type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                    "original_max_position_embeddings":8192},"mlp_bias":true})");
  const AttentionSpec& a = attention(c);
  EXPECT_EQ(a.num_kv_heads, 8);
  EXPECT_EQ(a.qk_head_dim, 8);
  EXPECT_EQ(a.rope.type, "llama3");
  EXPECT_EQ(a.rope.theta, 500000.0);
  EXPECT_EQ(a.rope.factor, 8.0);
  EXPECT_EQ(a.rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.layers[0].sublayers[1].mlp()->bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(c.vocab_size, 32000);
}

TEST(Families, MixtralDefaultsAndLayout) {
  ModelSpec c = parse(R"({"architectures":["MixtralForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":8,"intermediate_size":32,"sliding_window":null})");
  const MoeSpec& moe = *c.layers[1].moe();
  EXPECT_EQ(moe.router.num_experts, 8);
  EXPECT_EQ(moe.router.top_k, 2);
  EXPECT_TRUE(moe.router.renormalize);  // Mixtral always renormalises
  EXPECT_EQ(moe.experts.intermediate, 32);
  EXPECT_EQ(attention(c).num_kv_heads, 8);
  EXPECT_EQ(attention(c).rope.theta, 1e6);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_FALSE(attention(c).qk_norm || attention(c).qkv_bias || attention(c).o_bias);
  const ParameterLayout layout = parameter_layout(c);
  bool found = false;
  for (const ParameterSpec& p : layout.parameters)
    if (p.name == "layers.1.moe.experts_gate_up") {
      found = true;
      EXPECT_EQ(p.pieces[0].name, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
      EXPECT_EQ(p.pieces[1].name, "model.layers.1.block_sparse_moe.experts.0.w3.weight");
      EXPECT_EQ(p.fused_hf_name, "model.layers.1.mlp.experts.gate_up_proj");
    }
  EXPECT_TRUE(found);
}

TEST(Families, Qwen2MoeDefaultsAndSharedExpert) {
  ModelSpec c = parse(R"({"architectures":["Qwen2MoeForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":32,"use_sliding_window":false,"sliding_window":0})");
  const MoeSpec& moe = *c.layers[0].moe();
  EXPECT_EQ(moe.router.num_experts, 60);
  EXPECT_EQ(moe.router.top_k, 4);
  EXPECT_FALSE(moe.router.renormalize);
  EXPECT_EQ(moe.experts.intermediate, 1408);
  ASSERT_TRUE(moe.shared_expert.has_value());
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 5632);
  EXPECT_TRUE(moe.shared_expert->sigmoid_gate);
  EXPECT_TRUE(attention(c).qkv_bias);
  EXPECT_FALSE(attention(c).o_bias);
  EXPECT_EQ(attention(c).num_kv_heads, 16);  // Qwen2MoeConfig's default, not the heads (its __post_init__ has no fallback)
}

// hidden_act reaches every gated MLP the way transformers' ACT2FN does: the dense layers, the routed experts and the
// shared expert (not Qwen2-MoE's shared-expert gate, a sigmoid of its own); its spellings map to one gate each.
TEST(Families, HiddenActGatesEveryGatedMlp) {
  const ModelSpec qwen2_moe = parse(R"({"model_type":"qwen2_moe","hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":4,"hidden_act":"gelu_pytorch_tanh","mlp_only_layers":[1]})");
  EXPECT_EQ(qwen2_moe.layers[0].moe()->experts.gate, ops::GateFunction::GeluTanh);
  EXPECT_EQ(qwen2_moe.layers[0].moe()->shared_expert->mlp.gate, ops::GateFunction::GeluTanh);
  EXPECT_EQ(qwen2_moe.layers[1].sublayers[1].mlp()->gate, ops::GateFunction::GeluTanh);
  const ModelSpec deepseek = parse(R"({"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":4,"first_k_dense_replace":1,"n_routed_experts":8,"num_experts_per_tok":2,"n_group":1,
    "topk_group":1,"hidden_act":"relu"})");
  EXPECT_EQ(deepseek.layers[0].sublayers[1].mlp()->gate, ops::GateFunction::Relu);
  EXPECT_EQ(deepseek.layers[1].moe()->experts.gate, ops::GateFunction::Relu);
  EXPECT_EQ(deepseek.layers[1].moe()->shared_expert->mlp.gate, ops::GateFunction::Relu);
  const std::pair<const char*, ops::GateFunction> spellings[] = {{"silu", ops::GateFunction::Silu},
                                                                 {"swish", ops::GateFunction::Silu},
                                                                 {"gelu", ops::GateFunction::Gelu},
                                                                 {"gelu_new", ops::GateFunction::GeluTanh},
                                                                 {"gelu_fast", ops::GateFunction::GeluTanh},
                                                                 {"gelu_pytorch_tanh", ops::GateFunction::GeluTanh},
                                                                 {"quick_gelu", ops::GateFunction::QuickGelu},
                                                                 {"relu", ops::GateFunction::Relu}};
  for (const auto& [spelling, gate] : spellings) {
    const ModelSpec llama = parse(std::string(R"({"model_type":"llama","hidden_act":")") + spelling + R"("})");
    EXPECT_EQ(llama.layers[0].sublayers[1].mlp()->gate, gate) << spelling;
  }
  // GPT-OSS never reads hidden_act: its clamped SwiGLU stays.
  EXPECT_EQ(parse(R"({"model_type":"gpt_oss","hidden_act":"gelu"})").layers[0].moe()->experts.activation,
            Activation::ClampedSwiGLU);
}

// gpt-oss-20b's config.json as released (v4 spelling: rope_scaling beside rope_theta; MXFP4 experts).
const char* kGptOss20b = R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true, "attention_dropout": 0.0,
  "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
  "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 4,
  "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": false, "pad_token_id": 199999,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                          "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
  "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}, "rope_theta": 150000,
  "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": false,
  "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088})";

TEST(Families, GptOss20bAsReleased) {
  ModelSpec c = parse(kGptOss20b);
  EXPECT_EQ(c.family, "gpt_oss");
  EXPECT_EQ(c.norm_eps, 1e-5);
  for (size_t layer = 0; layer < 4; ++layer) {
    const AttentionSpec& a = attention(c, layer);
    EXPECT_TRUE(a.sinks && a.qkv_bias && a.o_bias);
    EXPECT_FALSE(a.qk_norm);
    EXPECT_EQ(a.sliding_window, layer % 2 == 0 ? std::optional<int64_t>(128) : std::nullopt) << layer;
    EXPECT_EQ(a.rope.type, "yarn");
    EXPECT_EQ(a.rope.theta, 150000.0);
    EXPECT_EQ(a.rope.factor, 32.0);
    EXPECT_FALSE(a.rope.truncate);
    EXPECT_EQ(a.rope.original_max_position_embeddings, 4096);
    EXPECT_EQ(a.qk_head_dim, 64);
    EXPECT_EQ(a.num_kv_heads, 8);
  }
  const MoeSpec& moe = *c.layers[0].moe();
  EXPECT_EQ(moe.router.num_experts, 32);
  EXPECT_EQ(moe.router.top_k, 4);
  EXPECT_TRUE(moe.router.is_topk_then_softmax());
  EXPECT_TRUE(moe.router.bias);
  EXPECT_TRUE(moe.experts.bias);
  EXPECT_EQ(moe.experts.intermediate, 2880);
  EXPECT_EQ(moe.experts.activation, Activation::ClampedSwiGLU);
  EXPECT_EQ(moe.experts.clamp.limit, 7.0f);
  EXPECT_EQ(moe.experts.clamp.alpha, 1.702f);
  EXPECT_EQ(c.aux_loss, AuxLoss::LoadBalancing);
  EXPECT_EQ(c.aux_loss_coef, 0.9);
  EXPECT_EQ(c.moe_layer_count(), 4);
  // transformers' num_parameters() for this config (a meta-device GptOssForCausalLM, 5.17.0); for all 24 layers
  // of gpt-oss-20b it gives 20914757184.
  EXPECT_EQ(parameter_layout(c).total_parameters(), 4451017664);
  json full = json::parse(kGptOss20b);
  full["num_hidden_layers"] = 24;
  full.erase("layer_types");
  EXPECT_EQ(parameter_layout(describe_model(full, "config.json")).total_parameters(), 20914757184);
}

TEST(Families, GptOssDefaultsAreGptOssConfigs) {
  // No layer_types, no RoPE: GptOssConfig slides the even layers and fills in its yarn dict.
  ModelSpec c = parse(R"({"architectures":["GptOssForCausalLM"],"hidden_size":64,"num_hidden_layers":3,
    "num_attention_heads":16,"intermediate_size":32,"num_local_experts":4})");
  EXPECT_EQ(attention(c, 0).sliding_window, 128);
  EXPECT_FALSE(attention(c, 1).sliding_window.has_value());
  EXPECT_EQ(attention(c, 2).sliding_window, 128);
  const ops::RopeSpec& rope = attention(c).rope;
  EXPECT_EQ(rope.type, "yarn");
  EXPECT_EQ(rope.theta, 150000.0);
  EXPECT_EQ(rope.factor, 32.0);
  EXPECT_EQ(rope.beta_fast, 32.0);
  EXPECT_EQ(rope.beta_slow, 1.0);
  EXPECT_FALSE(rope.truncate);
  EXPECT_EQ(rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(attention(c).qk_head_dim, 64);  // GptOssConfig's head_dim default, not hidden / heads
  EXPECT_EQ(attention(c).num_kv_heads, 8);
  EXPECT_EQ(c.layers[0].moe()->router.top_k, 4);
  EXPECT_EQ(c.vocab_size, 201088);
  EXPECT_FALSE(c.aux_loss_by_default);
  // The v5 spelling: rope_parameters, and truncate absent means true (transformers' default).
  ModelSpec v5 = parse(R"({"model_type":"gpt_oss","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,
    "num_key_value_heads":2,"intermediate_size":32,"num_local_experts":4,"rope_parameters":{"rope_type":"yarn","rope_theta":1000.0,
    "factor":8.0,"original_max_position_embeddings":256}})");
  EXPECT_TRUE(attention(v5).rope.truncate);
  EXPECT_EQ(attention(v5).rope.theta, 1000.0);
}

TEST(Families, GptOssLayoutIsTransformersFusedAndTransposed) {
  ModelSpec c = parse(R"({"architectures":["GptOssForCausalLM"],"hidden_size":64,"num_hidden_layers":1,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":32,"num_local_experts":4})");
  const ParameterLayout layout = parameter_layout(c);
  std::map<std::string, const ParameterSpec*> by_name;
  for (const ParameterSpec& p : layout.parameters) by_name[p.name] = &p;
  ASSERT_TRUE(by_name.count("layers.0.attn.sinks"));
  EXPECT_EQ(by_name["layers.0.attn.sinks"]->pieces[0].name, "model.layers.0.self_attn.sinks");
  EXPECT_EQ(by_name["layers.0.moe.router_bias"]->pieces[0].name, "model.layers.0.mlp.router.bias");
  EXPECT_EQ(by_name["layers.0.moe.router"]->pieces[0].name, "model.layers.0.mlp.router.weight");
  const ParameterSpec& gate_up = *by_name["layers.0.moe.experts_gate_up"];
  EXPECT_EQ(gate_up.shape, Shape({4, 64, 64}));
  ASSERT_EQ(gate_up.pieces.size(), 1u);
  EXPECT_EQ(gate_up.pieces[0].name, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(gate_up.pieces[0].shape, Shape({4, 64, 64}));
  EXPECT_TRUE(gate_up.pieces[0].transposed && gate_up.pieces[0].interleaved_pairs);
  EXPECT_TRUE(gate_up.fused_hf_name.empty());
  const ParameterSpec& down = *by_name["layers.0.moe.experts_down"];
  EXPECT_EQ(down.shape, Shape({4, 64, 32}));
  EXPECT_EQ(down.pieces[0].shape, Shape({4, 32, 64}));
  EXPECT_TRUE(down.pieces[0].transposed && !down.pieces[0].interleaved_pairs);
  const ParameterSpec& gate_up_bias = *by_name["layers.0.moe.experts_gate_up_bias"];
  EXPECT_EQ(gate_up_bias.pieces[0].name, "model.layers.0.mlp.experts.gate_up_proj_bias");
  EXPECT_TRUE(gate_up_bias.pieces[0].interleaved_pairs && !gate_up_bias.pieces[0].transposed);
  EXPECT_EQ(gate_up_bias.placement, Placement::ExpertSharded);
  EXPECT_EQ(by_name["layers.0.moe.experts_down_bias"]->shape, Shape({4, 64}));
  EXPECT_TRUE(by_name.count("layers.0.attn.qkv_bias") && by_name.count("layers.0.attn.o_bias"));
}

TEST(Families, IntegersWrittenAsWholeFloats) {
  EXPECT_EQ(parse(R"({"model_type":"llama","hidden_size":64.0,"num_attention_heads":4})").hidden_size, 64);
}

// GLM-4.5-Air's config.json as released (v4 spelling: rope_theta and partial_rotary_factor at the top).
const char* kGlm45Air = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": true, "attention_dropout": 0.0,
  "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "partial_rotary_factor": 0.5, "initializer_range": 0.02, "intermediate_size": 10944,
  "max_position_embeddings": 131072, "moe_intermediate_size": 1408, "norm_topk_prob": true, "num_attention_heads": 96,
  "n_group": 1, "topk_group": 1, "n_routed_experts": 128, "n_shared_experts": 1, "routed_scaling_factor": 1.0,
  "num_experts_per_tok": 8, "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.54.0", "use_cache": true,
  "use_qk_norm": false, "vocab_size": 151552})";

TEST(Families, Glm45AirAsReleased) {
  const ModelSpec c = parse(kGlm45Air);
  EXPECT_EQ(c.family, "glm4_moe");
  ASSERT_EQ(c.num_layers(), 46);
  ASSERT_NE(c.layers[0].sublayers[1].mlp(), nullptr);
  EXPECT_EQ(c.layers[0].sublayers[1].mlp()->intermediate, 10944);
  const MoeSpec& moe = *c.layers[1].moe();
  EXPECT_EQ(moe.router.num_experts, 128);
  EXPECT_EQ(moe.router.top_k, 8);
  EXPECT_EQ(moe.router.score, RouterScore::Sigmoid);
  EXPECT_TRUE(moe.router.correction_bias);
  EXPECT_EQ(moe.router.num_groups, 1);
  EXPECT_EQ(moe.router.scaling_factor, 1.0);
  EXPECT_TRUE(moe.router.renormalize);
  EXPECT_EQ(moe.experts.intermediate, 1408);
  ASSERT_TRUE(moe.shared_expert.has_value());
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 1408);
  EXPECT_FALSE(moe.shared_expert->sigmoid_gate);
  EXPECT_TRUE(c.carries_mtp_layers);
  const AttentionSpec& a = attention(c);
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_FALSE(a.o_bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(a.qk_head_dim, 128);
  EXPECT_EQ(a.num_kv_heads, 8);
  EXPECT_EQ(a.rope.partial_rotary_factor, 0.5);
  EXPECT_EQ(a.rope.theta, 1e6);
  // The rotating 64 dimensions' default schedule, then zeros for the 32 pairs that pass unrotated.
  const std::vector<float> inv = ops::rope_inverse_frequencies(a.rope, 128);
  ASSERT_EQ(inv.size(), 64u);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(inv[i], 1.0f / std::pow(1e6f, float(2 * i) / 64.0f)) << i;
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(inv[i], 0.0f) << i;
}

// Glm4MoeConfig's defaults, and partial_rotary_factor as transformers 5.17 resolves it: rope_parameters' value,
// else the top-level one, else 0.5; on any schedule but default it is refused, as is an odd rotating count.
TEST(Families, Glm4MoeDefaultsAndPartialRope) {
  const ModelSpec d = parse(R"({"model_type":"glm4_moe","num_hidden_layers":2})");
  EXPECT_EQ(attention(d).rope.partial_rotary_factor, 0.5);
  EXPECT_EQ(attention(d).qk_head_dim, 4096 / 96);
  // head_dim 42: int(42 · 0.5) = 21, whose 11 frequencies (over 21) rotate 22 dimensions, as in transformers.
  EXPECT_EQ(ops::rope_rotary_dim(attention(d).rope, 42), 22);
  const std::vector<float> inv = ops::rope_inverse_frequencies(attention(d).rope, 42);
  EXPECT_EQ(inv[10], 1.0f / std::pow(10000.0f, 20.0f / 21.0f));
  EXPECT_EQ(inv[11], 0.0f);
  EXPECT_EQ(attention(d).num_kv_heads, 8);
  EXPECT_EQ(d.vocab_size, 151552);
  EXPECT_EQ(d.norm_eps, 1e-5);
  ASSERT_NE(d.layers[0].sublayers[1].mlp(), nullptr);
  const MoeSpec& moe = *d.layers[1].moe();
  EXPECT_EQ(moe.router.num_experts, 128);
  EXPECT_EQ(moe.router.num_groups, 1);
  EXPECT_EQ(moe.router.scaling_factor, 1.0);
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 1408);
  const ModelSpec both = parse(R"({"model_type":"glm4_moe","num_hidden_layers":1,"partial_rotary_factor":0.75,
    "rope_parameters":{"rope_type":"default","rope_theta":1e6,"partial_rotary_factor":0.25}})");
  EXPECT_EQ(attention(both).rope.partial_rotary_factor, 0.25);
  EXPECT_NE(error_of(R"({"model_type":"glm4_moe","partial_rotary_factor":0.5,
    "rope_parameters":{"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":64}})")
                .find("'partial_rotary_factor'"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"model_type":"glm4_moe","head_dim":8,"partial_rotary_factor":0.1})").find("'partial_rotary_factor'"),
      std::string::npos);  // int(8 · 0.1) = 0: nothing rotates
}

// Glm4MoeLiteConfig's defaults (GLM-4.7-Flash's widths), mlp_layer_types placing dense and MoE layers (absent:
// the first dense), head_dim as the config class's other name for qk_rope_head_dim, and what is refused.
TEST(Families, Glm4MoeLiteDefaultsAndLayerTypes) {
  const ModelSpec d = parse(R"({"model_type":"glm4_moe_lite","num_hidden_layers":3})");
  const AttentionSpec& a = attention(d);
  ASSERT_TRUE(a.mla.has_value());
  EXPECT_EQ(a.mla->q_lora_rank, 768);
  EXPECT_EQ(a.mla->kv_lora_rank, 512);
  EXPECT_EQ(a.mla->qk_nope_head_dim, 192);
  EXPECT_EQ(a.mla->qk_rope_head_dim, 64);
  EXPECT_TRUE(a.mla->rope_interleave);
  EXPECT_EQ(a.qk_head_dim, 256);
  EXPECT_EQ(a.v_head_dim, 256);
  EXPECT_EQ(a.num_heads, 20);
  EXPECT_EQ(d.vocab_size, 154880);
  EXPECT_EQ(d.norm_eps, 1e-5);
  EXPECT_TRUE(d.carries_mtp_layers);
  ASSERT_NE(d.layers[0].sublayers[1].mlp(), nullptr);
  EXPECT_EQ(d.layers[0].sublayers[1].mlp()->intermediate, 10240);
  const MoeSpec& moe = *d.layers[1].moe();
  EXPECT_EQ(moe.router.num_experts, 64);
  EXPECT_EQ(moe.router.top_k, 4);
  EXPECT_EQ(moe.router.scaling_factor, 1.8);
  EXPECT_EQ(moe.experts.intermediate, 1536);
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 1536);
  ASSERT_NE(d.layers[2].moe(), nullptr);
  const ModelSpec typed = parse(R"({"model_type":"glm4_moe_lite","num_hidden_layers":3,"head_dim":32,
    "first_k_dense_replace":2,"mlp_layer_types":["sparse","dense","sparse","dense"]})");
  EXPECT_NE(typed.layers[0].moe(), nullptr);  // the list decides; first_k_dense_replace is not the class's
  EXPECT_EQ(typed.layers[1].moe(), nullptr);
  EXPECT_NE(typed.layers[2].moe(), nullptr);
  EXPECT_EQ(attention(typed).mla->qk_rope_head_dim, 32);
  EXPECT_NE(
      error_of(R"({"model_type":"glm4_moe_lite","num_hidden_layers":3,"mlp_layer_types":["dense","moe","sparse"]})")
          .find("'mlp_layer_types'[1]"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"glm4_moe_lite","num_hidden_layers":3,"mlp_layer_types":["dense"]})")
                .find("'mlp_layer_types'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"glm4_moe_lite","head_dim":32,"qk_rope_head_dim":64})").find("'head_dim'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"glm4_moe_lite","rope_parameters":{"rope_type":"default","rope_theta":1e6,
    "partial_rotary_factor":0.5}})")
                .find("'partial_rotary_factor'"),
            std::string::npos);
  EXPECT_EQ(attention(parse(R"({"model_type":"glm4_moe_lite","num_hidden_layers":1,"rope_parameters":{
    "rope_type":"default","rope_theta":1e6,"partial_rotary_factor":1.0}})"))
                .mla->qk_rope_head_dim,
            64);
}

TEST(Families, UnknownArchitectureListsTheSupportedOnes) {
  std::string error = error_of(R"({"architectures":["CohereForCausalLM"]})");
  EXPECT_NE(error.find("config.json"), std::string::npos);
  EXPECT_NE(error.find("'CohereForCausalLM'"), std::string::npos);
  for (const auto& name : supported_architectures()) EXPECT_NE(error.find(name), std::string::npos) << error;
}

// model_type picks the family, as AutoModelForCausalLM does; architectures only where model_type is unknown
// (remote-code configs such as Kimi-K2's kimi_k2 / DeepseekV3ForCausalLM); known and contradicting: refused.
TEST(Families, ModelTypePicksTheFamily) {
  EXPECT_EQ(parse(R"({"model_type":"llama","architectures":["LlamaModel"],"num_attention_heads":4})").family, "llama");
  EXPECT_EQ(parse(R"({"model_type":"llama","architectures":[],"num_attention_heads":4})").family, "llama");
  EXPECT_EQ(parse(R"({"model_type":"kimi_k2","architectures":["DeepseekV3ForCausalLM"]})").family, "deepseek_v3");
  const std::string error = error_of(R"({"model_type":"llama","architectures":["Qwen3ForCausalLM"]})");
  EXPECT_NE(error.find("'model_type'"), std::string::npos) << error;
  EXPECT_NE(error.find("Qwen3ForCausalLM"), std::string::npos) << error;
  EXPECT_NE(error_of(R"({"model_type":"cohere","architectures":["CohereForCausalLM"]})").find("'cohere'"),
            std::string::npos);
}

TEST(Families, BadValuesNameTheKey) {
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":"big"})").find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64.5})").find("'hidden_size'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","tie_word_embeddings":"yes"})").find("'tie_word_embeddings'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":3})")
                .find("'num_key_value_heads'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_experts":4,"num_experts_per_tok":8})").find("'num_experts_per_tok'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_act":"mish"})").find("'hidden_act'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","dtype":"float7"})").find("'dtype'"), std::string::npos);
  EXPECT_NE(error_of(R"([1,2])").find("not a JSON object"), std::string::npos);
  // Hostile values fail before anything is allocated or divided.
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","decoder_sparse_step":0})").find("'decoder_sparse_step'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_hidden_layers":1000000000})").find("'num_hidden_layers'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_local_experts":1000000000})").find("'num_experts'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","num_hidden_layers":2,"layer_types":["full_attention","dense"]})")
                .find("'layer_types'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","use_sliding_window":true,"sliding_window":0})").find("'sliding_window'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_scaling":{"rope_type":"linear","factor":0}})").find("'factor'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"gpt_oss","sliding_window":0})").find("'sliding_window'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"gpt_oss","num_hidden_layers":2,"layer_types":["full_attention"]})")
                .find("'layer_types'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"gpt_oss","num_hidden_layers":1,"layer_types":["chunked_attention"]})")
                .find("'layer_types'"), std::string::npos);
}

// What the engine does not implement is refused, naming the key: never trained as something else.
TEST(Families, UnimplementedOptionsAreRefusedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type":"llama","rope_parameters":{"rope_type":"xpos","factor":2.0}})", "'rope_parameters'"},
      // Partial RoPE on a scaled schedule (transformers' rotation fails on the shortened frequencies).
      {R"({"model_type":"llama","partial_rotary_factor":0.5,"rope_scaling":{"rope_type":"linear","factor":2.0}})",
       "'partial_rotary_factor'"},
      {R"({"model_type":"llama","attention_dropout":0.1})", "'attention_dropout'"},
      {R"({"model_type":"qwen3","is_causal":false})", "'is_causal'"},
      {R"({"model_type":"mixtral","router_jitter_noise":0.1})", "'router_jitter_noise'"},
      {R"({"model_type":"gpt_oss","rope_parameters":{"rope_type":"xpos","factor":2.0}})", "'rope_parameters'"},
      {R"({"model_type":"gpt_oss","quantization_config":{"quant_method":"fp8"}})", "'quantization_config'"},
      {R"({"model_type":"gpt_oss","attention_dropout":0.1})", "'attention_dropout'"},
  };
  for (const auto& [config, key] : cases) {
    const std::string error = error_of(config);
    EXPECT_NE(error.find(key), std::string::npos) << config << " -> " << error;
    EXPECT_NE(error.find("not implemented"), std::string::npos) << config << " -> " << error;
  }
}

// What transformers 5.17 runs for these families, accepted as it reads it (helpers 41-43's audits).
TEST(Families, RopeSchedulesEveryFamilyTakes) {
  for (const char* type : {"llama", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral"}) {
    const json yarn = {{"model_type", type}, {"num_attention_heads", 32}, {"max_position_embeddings", 16384},
                       {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}}}};
    const ModelSpec y = describe_model(yarn, "config.json");
    EXPECT_EQ(attention(y).rope.type, "yarn") << type;
    EXPECT_EQ(attention(y).rope.factor, 4.0) << type;
    EXPECT_TRUE(attention(y).rope.truncate) << type;
    // dynamic: default RoPE below max_position_embeddings (its frequencies are the default ones).
    const ModelSpec d = describe_model(json{{"model_type", type}, {"num_attention_heads", 32},
                                            {"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}}}, "config.json");
    EXPECT_EQ(attention(d).rope.type, "dynamic") << type;
    ops::RopeSpec plain = attention(d).rope;
    plain.type = "default";
    EXPECT_EQ(ops::rope_inverse_frequencies(attention(d).rope, 128), ops::rope_inverse_frequencies(plain, 128)) << type;
    // Every family's default RoPE rotates the whole head whatever partial_rotary_factor says.
    const ModelSpec p = describe_model(json{{"model_type", type}, {"num_attention_heads", 32}, {"partial_rotary_factor", 0.5}},
                                       "config.json");
    EXPECT_EQ(attention(p).rope.partial_rotary_factor, 1.0) << type;
  }
  // rope_scaling false is falsy: rope_parameters (or default RoPE) as Python's `or` reads it.
  EXPECT_EQ(attention(parse(R"({"model_type":"llama","num_attention_heads":32,"rope_scaling":false})")).rope.type, "default");
  // YaRN's explicit null factor: max_position_embeddings / original_max_position_embeddings (_compute_yarn_parameters).
  const ModelSpec n = parse(R"({"model_type":"qwen3","max_position_embeddings":4096,
    "rope_parameters":{"rope_type":"yarn","factor":null,"original_max_position_embeddings":1024}})");
  EXPECT_EQ(attention(n).rope.factor, 4.0);
}

// require_rope_positions refuses the batch `ids` (positions 0, 1, ... per row), naming `key`.
void expect_position_refused(const ModelSpec& spec, const Tensor& ids, const char* key) {
  try {
    require_rope_positions(spec, sequence_layout(ids, Tensor(), Tensor()));
    ADD_FAILURE() << "positions up to " << ids.size(1) - 1 << " were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

// longrope as transformers reads it: its short factors while a batch's positions stay below
// original_max_position_embeddings (from the dict or, as Phi-3 writes it, the top level), its long factors once one
// does not, factor from max_position_embeddings / original when absent, the attention factor derived from it or
// given; factor lists missing or of other lengths refused.
TEST(Families, LongropeShortAndLongFactors) {
  const ModelSpec spec = parse(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,
    "max_position_embeddings":64,"rope_parameters":{"rope_type":"longrope","rope_theta":10000.0,
    "short_factor":[1.0,1.5,2.0,2.5,3.0,3.5,4.0,4.5],"long_factor":[5,5,5,5,5,5,5,5],
    "original_max_position_embeddings":8}})");
  const ops::RopeSpec& rope = attention(spec).rope;
  EXPECT_EQ(rope.factor, 8.0);
  EXPECT_NEAR(ops::rope_attention_scaling(rope), std::sqrt(1.0 + std::log(8.0) / std::log(8.0)), 1e-12);
  const std::vector<float> inv = ops::rope_inverse_frequencies(rope, 16);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 1.0f / (1.5f * std::pow(10000.0f, 2.0f / 16.0f)));
  const std::vector<float> long_inv = ops::rope_inverse_frequencies(rope, 16, /*long_factors=*/true);
  EXPECT_FLOAT_EQ(long_inv[0], 1.0f / 5.0f);
  EXPECT_FLOAT_EQ(long_inv[1], 1.0f / (5.0f * std::pow(10000.0f, 2.0f / 16.0f)));
  // transformers' max(position_ids) + 1 > original: 8 positions run the short factors, 9 the long ones at every
  // position, and 9 tokens packed as two documents the short ones again.
  const auto positions_of = [](const Tensor& ids, const Tensor& position_ids) {
    return sequence_layout(ids, position_ids, Tensor()).positions;
  };
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>(8, 1), {1, 8});
  const Tensor long_ids = Tensor::from_vector(std::vector<int64_t>(9, 1), {1, 9});
  EXPECT_NO_THROW(require_rope_positions(spec, sequence_layout(long_ids, Tensor(), Tensor())));
  EXPECT_FALSE(ops::rope_runs_long_factors(rope, positions_of(ids, Tensor())));
  EXPECT_TRUE(ops::rope_runs_long_factors(rope, positions_of(long_ids, Tensor())));
  const Tensor packed = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3}, {1, 9});
  EXPECT_FALSE(ops::rope_runs_long_factors(rope, positions_of(long_ids, packed)));
  EXPECT_FALSE(ops::rope_runs_long_factors(attention(parse(R"({"model_type":"llama","hidden_size":64,
    "num_attention_heads":4,"num_hidden_layers":1,"max_position_embeddings":8})"))
                                               .rope,
                                           positions_of(long_ids, Tensor())));
  const ops::RopeFactorSets<std::vector<float>> sets(
      rope, [&](bool long_factors) { return ops::rope_inverse_frequencies(rope, 16, long_factors); });
  EXPECT_EQ(sets.for_positions(positions_of(ids, Tensor())), inv);
  EXPECT_EQ(sets.for_positions(positions_of(long_ids, Tensor())), long_inv);
  const ModelSpec given = parse(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,
    "original_max_position_embeddings":16,"rope_parameters":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1],
    "long_factor":[2,2,2,2,2,2,2,2],"factor":1.0,"attention_factor":0.75}})");
  EXPECT_EQ(attention(given).rope.original_max_position_embeddings, 16);
  EXPECT_EQ(ops::rope_attention_scaling(attention(given).rope), 0.75);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_parameters":{"rope_type":"longrope","long_factor":[1],
    "original_max_position_embeddings":8}})")
                .find("'short_factor'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_parameters":{"rope_type":"longrope","short_factor":[1,2],
    "long_factor":[1],"original_max_position_embeddings":8}})")
                .find("'long_factor'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_parameters":{"rope_type":"longrope","short_factor":[1],
    "long_factor":[1]}})")
                .find("'original_max_position_embeddings'"),
            std::string::npos);
}

// Dynamic RoPE rescales once a position reaches max_position_embeddings: refused there, naming the key.
TEST(Families, DynamicRopeRefusesPositionsBeyondItsRange) {
  const ModelSpec spec = parse(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,
    "max_position_embeddings":8,"rope_parameters":{"rope_type":"dynamic","factor":2.0}})");
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>(8, 1), {1, 8});
  EXPECT_NO_THROW(require_rope_positions(spec, sequence_layout(ids, Tensor(), Tensor())));
  const Tensor long_ids = Tensor::from_vector(std::vector<int64_t>(9, 1), {1, 9});
  expect_position_refused(spec, long_ids, "'max_position_embeddings'");
  // Packed documents restart their positions: 9 tokens in two documents stay in range.
  EXPECT_NO_THROW(require_rope_positions(spec, sequence_layout(long_ids, Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3}, {1, 9}), Tensor())));
  // Other schedules take any position.
  const ModelSpec plain = parse(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,
    "max_position_embeddings":8})");
  EXPECT_NO_THROW(require_rope_positions(plain, sequence_layout(long_ids, Tensor(), Tensor())));
}

std::vector<std::optional<int64_t>> windows_of(const ModelSpec& spec) {
  std::vector<std::optional<int64_t>> windows;
  for (size_t layer = 0; layer < spec.layers.size(); ++layer) windows.push_back(attention(spec, layer).sliding_window);
  return windows;
}

// Sliding windows as each config class and modeling file place them (masking_utils: kv > q - window).
TEST(Families, SlidingWindowsWhereTransformersPutsThem) {
  using W = std::vector<std::optional<int64_t>>;
  const std::optional<int64_t> none;
  // Qwen3: layer_types when listed, else the layers from max_window_layers on; no window unless use_sliding_window.
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3","num_hidden_layers":4,"use_sliding_window":true,
    "sliding_window":64,"max_window_layers":2})")), (W{none, none, 64, 64}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3","num_hidden_layers":2,"use_sliding_window":true,"sliding_window":32,
    "layer_types":["sliding_attention","full_attention"]})")), (W{32, none}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3","num_hidden_layers":4,"use_sliding_window":true,
    "sliding_window":null,"max_window_layers":2})")), (W{none, none, none, none}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3","num_hidden_layers":2,"use_sliding_window":false,"sliding_window":64,
    "max_window_layers":0})")), (W{none, none}));
  // A layer listed as sliding without a window: transformers' mask fails; refused naming the keys.
  EXPECT_NE(error_of(R"({"model_type":"qwen3","num_hidden_layers":2,"layer_types":["full_attention","sliding_attention"]})")
                .find("'sliding_window'"), std::string::npos);
  // Qwen3-MoE: every layer with use_sliding_window; layer_types is not read.
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3_moe","num_hidden_layers":2,"use_sliding_window":true,
    "sliding_window":16,"layer_types":["full_attention","full_attention"]})")), (W{16, 16}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen3_moe","num_hidden_layers":2,
    "layer_types":["sliding_attention","full_attention"]})")), (W{none, none}));
  // Qwen2-MoE: the even layers below max_window_layers.
  EXPECT_EQ(windows_of(parse(R"({"model_type":"qwen2_moe","num_hidden_layers":4,"num_attention_heads":16,
    "use_sliding_window":true,"sliding_window":64,"max_window_layers":3})")), (W{64, none, 64, none}));
  // Mixtral: every layer when sliding_window is not null.
  EXPECT_EQ(windows_of(parse(R"({"model_type":"mixtral","num_hidden_layers":2,"sliding_window":4096})")), (W{4096, 4096}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"mixtral","num_hidden_layers":2,"sliding_window":null})")), (W{none, none}));
}

// Qwen MoE layers: num_experts 0 makes every layer dense; mlp_only_layers naming no layer match nothing; a negative
// decoder_sparse_step acts as its magnitude (Python's %).
TEST(Families, QwenSparseLayersAsTransformersPicksThem) {
  const ModelSpec none = parse(R"({"model_type":"qwen3_moe","num_hidden_layers":2,"num_experts":0})");
  EXPECT_EQ(none.layers[0].moe(), nullptr);
  EXPECT_EQ(none.layers[1].moe(), nullptr);
  EXPECT_EQ(none.aux_loss, AuxLoss::None);
  const ModelSpec out_of_range = parse(R"({"model_type":"qwen3_moe","num_hidden_layers":2,"mlp_only_layers":[5,-1]})");
  EXPECT_NE(out_of_range.layers[0].moe(), nullptr);
  EXPECT_NE(out_of_range.layers[1].moe(), nullptr);
  const ModelSpec negative = parse(R"({"model_type":"qwen2_moe","num_hidden_layers":4,"num_attention_heads":16,
    "decoder_sparse_step":-2})");
  EXPECT_EQ(negative.layers[0].moe(), nullptr);
  EXPECT_NE(negative.layers[1].moe(), nullptr);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_experts":0,"output_router_logits":true})").find("'output_router_logits'"),
            std::string::npos);
}

// Keys a family's modeling code never reads are not refused for it; attribute_map aliases win over their fields.
TEST(Families, KeysOnlySomeFamiliesRead) {
  EXPECT_NO_THROW(parse(R"({"model_type":"gpt_oss","hidden_act":"gelu"})"));
  // GPT-OSS's sliding_window is read by sliding layers only.
  EXPECT_NO_THROW(parse(R"({"model_type":"gpt_oss","num_hidden_layers":2,"sliding_window":0,
    "layer_types":["full_attention","full_attention"]})"));
  EXPECT_NO_THROW(parse(R"({"model_type":"gpt_oss","router_jitter_noise":0.1})"));
  EXPECT_NO_THROW(parse(R"({"model_type":"qwen2_moe","num_attention_heads":16,"router_jitter_noise":0.1})"));
  EXPECT_NO_THROW(parse(R"({"model_type":"qwen3_moe","router_jitter_noise":0.1})"));
  EXPECT_EQ(parse(R"({"model_type":"mixtral","num_experts":4,"num_local_experts":6})").layers[0].moe()->router.num_experts, 4);
  EXPECT_EQ(parse(R"({"model_type":"gpt_oss","num_experts":8,"num_local_experts":16})").layers[0].moe()->router.num_experts, 8);
}

// Qwen2ForCausalLM and MistralForCausalLM: transformers v5's defaults and where their windows go.
TEST(Families, Qwen2AndMistralDefaults) {
  const ModelSpec q = parse(R"({"model_type":"qwen2","num_hidden_layers":3,"use_sliding_window":true,"sliding_window":16,
    "max_window_layers":1})");
  EXPECT_EQ(q.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_EQ(attention(q).num_kv_heads, 32);
  EXPECT_EQ(attention(q).qk_head_dim, 128);  // 4096 / 32
  EXPECT_TRUE(attention(q).qkv_bias);
  EXPECT_FALSE(attention(q).o_bias);
  EXPECT_FALSE(attention(q).qk_norm);
  EXPECT_EQ(windows_of(q), (std::vector<std::optional<int64_t>>{std::nullopt, 16, 16}));
  EXPECT_EQ(q.layers[0].sublayers[1].mlp()->intermediate, 22016);

  const ModelSpec m = parse(R"({"model_type":"mistral","num_hidden_layers":2})");
  EXPECT_EQ(m.architecture, "MistralForCausalLM");
  EXPECT_EQ(attention(m).num_kv_heads, 8);
  EXPECT_FALSE(attention(m).qkv_bias);
  EXPECT_EQ(windows_of(m), (std::vector<std::optional<int64_t>>{4096, 4096}));  // MistralConfig's default window
  EXPECT_EQ(m.max_position_embeddings, 131072);
  const ModelSpec v3 = parse(R"({"model_type":"mistral","num_hidden_layers":2,"sliding_window":null,"head_dim":128,
    "hidden_size":5120})");
  EXPECT_EQ(windows_of(v3), (std::vector<std::optional<int64_t>>{std::nullopt, std::nullopt}));
  EXPECT_EQ(attention(v3).qk_head_dim, 128);
}

// Phi3ForCausalLM: Phi3Config's defaults (its token ids included: pad 32000 is the embedding's padding row when the
// file leaves the key out), a window on every layer only when sliding_window is set, default RoPE over
// partial_rotary_factor of each head (Phi-4-mini's top-level spelling), v4's "su" / "yarn" read as longrope, the
// other schedules rejected as Phi3Config rejects them, dropouts refused; q/k/v and gate/up one HF tensor each.
TEST(Families, Phi3DefaultsSpellingsAndFusedProjections) {
  const ModelSpec d = parse(R"({"model_type":"phi3","num_hidden_layers":2})");
  EXPECT_EQ(d.architecture, "Phi3ForCausalLM");
  EXPECT_EQ(d.vocab_size, 32064);
  EXPECT_EQ(d.hidden_size, 3072);
  EXPECT_EQ(attention(d).num_kv_heads, 32);
  EXPECT_EQ(attention(d).qk_head_dim, 96);
  EXPECT_DOUBLE_EQ(d.norm_eps, 1e-5);
  EXPECT_EQ(d.max_position_embeddings, 4096);
  EXPECT_EQ(d.layers[0].sublayers[1].mlp()->intermediate, 8192);
  EXPECT_EQ(windows_of(d), (std::vector<std::optional<int64_t>>{std::nullopt, std::nullopt}));
  EXPECT_EQ(d.embedding_padding_idx, std::optional<int64_t>(32000));
  EXPECT_EQ(d.bos_token_id, std::optional<int64_t>(1));
  EXPECT_EQ(d.eos_token_ids, std::vector<int64_t>{32000});
  EXPECT_EQ(parse(R"({"model_type":"phi3","pad_token_id":null})").embedding_padding_idx, std::nullopt);

  const ModelSpec mini =
      parse(R"({"model_type":"phi3","num_hidden_layers":2,"hidden_size":3072,"num_attention_heads":24,
    "num_key_value_heads":8,"partial_rotary_factor":0.75,"sliding_window":262144,"vocab_size":200064,
    "pad_token_id":199999})");
  EXPECT_EQ(ops::rope_rotary_dim(attention(mini).rope, attention(mini).qk_head_dim), 96);  // of 128
  EXPECT_EQ(windows_of(mini), (std::vector<std::optional<int64_t>>{262144, 262144}));
  const ParameterLayout layout = parameter_layout(mini);
  auto named = [&](const std::string& name) {
    for (const ParameterSpec& p : layout.parameters)
      if (p.name == name) return &p;
    return static_cast<const ParameterSpec*>(nullptr);
  };
  const ParameterSpec *qkv = named("layers.0.attn.qkv"), *gate_up = named("layers.0.mlp.gate_up");
  ASSERT_TRUE(qkv && gate_up);
  ASSERT_EQ(qkv->pieces.size(), 1u);
  EXPECT_EQ(qkv->pieces[0].name, "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(qkv->shape, (Shape{(24 + 2 * 8) * 128, 3072}));
  EXPECT_EQ(qkv->pieces[0].partial_rotary, (PartialRotary{128, 96, (24 + 8) * 128}));  // v's rows stay as stored
  ASSERT_EQ(gate_up->pieces.size(), 1u);
  EXPECT_EQ(gate_up->pieces[0].name, "model.layers.0.mlp.gate_up_proj.weight");

  const char* longrope = R"({"model_type":"phi3","num_hidden_layers":1,"hidden_size":64,"num_attention_heads":4,
    "original_max_position_embeddings":32,"max_position_embeddings":128,
    "rope_scaling":{"type":"%s","short_factor":[1,1,1,1,1,1,1,2],"long_factor":[2,2,2,2,2,2,2,2]}})";
  for (const char* legacy : {"su", "yarn", "longrope"}) {
    char text[512];
    std::snprintf(text, sizeof text, longrope, legacy);
    EXPECT_EQ(attention(parse(text)).rope.type, "longrope") << legacy;
  }
  EXPECT_NE(
      error_of(R"({"model_type":"phi3","rope_scaling":{"type":"linear","factor":2}})").find("default or longrope"),
      std::string::npos);
  // Llama's attention rotates whole heads (transformers fails on a partial longrope there): refused, named.
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"partial_rotary_factor":0.5,
    "original_max_position_embeddings":32,"max_position_embeddings":128,
    "rope_scaling":{"type":"longrope","short_factor":[1,1,1,1],"long_factor":[2,2,2,2]}})")
                .find("'partial_rotary_factor'"),
            std::string::npos);
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attention_dropout"})
    EXPECT_NE(error_of(json{{"model_type", "phi3"}, {key, 0.1}}.dump()).find(key), std::string::npos) << key;
}

// SmolLM3ForCausalLM: SmolLM3Config's defaults (tied, its token ids, a NoPE layer every 4th), no_rope_layers and
// layer_types as written, sliding windows derived for the NoPE layers; a sliding layer without a window refused.
TEST(Families, SmolLM3NoPeLayersAndWindows) {
  const ModelSpec d = parse(R"({"model_type":"smollm3","num_hidden_layers":8})");
  EXPECT_EQ(d.architecture, "SmolLM3ForCausalLM");
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.vocab_size, 128256);
  EXPECT_EQ(attention(d).num_kv_heads, 4);
  EXPECT_EQ(d.embedding_padding_idx, std::optional<int64_t>(128004));
  EXPECT_EQ(d.eos_token_ids, std::vector<int64_t>{128001});
  std::vector<std::string> ropes;
  for (size_t i = 0; i < 8; ++i) ropes.push_back(attention(d, i).rope.type);
  EXPECT_EQ(ropes, (std::vector<std::string>{"default", "default", "default", "none", "default", "default", "default",
                                             "none"}));
  EXPECT_EQ(windows_of(d), std::vector<std::optional<int64_t>>(8));
  const ModelSpec slide = parse(R"({"model_type":"smollm3","num_hidden_layers":3,"no_rope_layers":[1,0,1],
    "use_sliding_window":true,"sliding_window":64,"attention_bias":true})");
  EXPECT_EQ(attention(slide, 1).rope.type, "none");
  EXPECT_EQ(windows_of(slide), (std::vector<std::optional<int64_t>>{std::nullopt, 64, std::nullopt}));
  EXPECT_TRUE(attention(slide).qkv_bias && attention(slide).o_bias);
  const ModelSpec typed = parse(R"({"model_type":"smollm3","num_hidden_layers":2,"sliding_window":32,
    "layer_types":["sliding_attention","full_attention"]})");
  EXPECT_EQ(windows_of(typed), (std::vector<std::optional<int64_t>>{32, std::nullopt}));
  EXPECT_NE(error_of(R"({"model_type":"smollm3","num_hidden_layers":1,"layer_types":["sliding_attention"]})")
                .find("'sliding_window'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"smollm3","num_hidden_layers":3,"no_rope_layers":[1]})").find("'no_rope_layers'"),
            std::string::npos);
}

// MinistralForCausalLM: MinistralConfig's defaults (a window of 4096 on every layer), layer_types as written.
TEST(Families, MinistralLayerTypes) {
  const ModelSpec d = parse(R"({"model_type":"ministral","num_hidden_layers":2})");
  EXPECT_EQ(d.architecture, "MinistralForCausalLM");
  EXPECT_EQ(windows_of(d), (std::vector<std::optional<int64_t>>{4096, 4096}));
  EXPECT_EQ(d.eos_token_ids, std::vector<int64_t>{2});
  const ModelSpec typed = parse(R"({"model_type":"ministral","num_hidden_layers":3,"sliding_window":32768,
    "layer_types":["full_attention","sliding_attention","full_attention"]})");
  EXPECT_EQ(windows_of(typed), (std::vector<std::optional<int64_t>>{std::nullopt, 32768, std::nullopt}));
  EXPECT_EQ(windows_of(parse(R"({"model_type":"ministral","num_hidden_layers":1,"sliding_window":null})")),
            std::vector<std::optional<int64_t>>(1));
  EXPECT_NE(error_of(R"({"model_type":"ministral","num_hidden_layers":1,"sliding_window":null,
    "layer_types":["sliding_attention"]})")
                .find("'sliding_window'"),
            std::string::npos);
}

// MiniMaxM2ForCausalLM: MiniMaxM2Config's defaults, q/k norms across heads, the sigmoid router with its correction
// bias on the block (Mixtral's names otherwise), output_router_logits refused (a softmax top-k in transformers).
TEST(Families, MiniMaxM2DefaultsAndNames) {
  const ModelSpec d = parse(R"({"model_type":"minimax_m2","num_hidden_layers":1})");
  EXPECT_EQ(d.architecture, "MiniMaxM2ForCausalLM");
  EXPECT_EQ(attention(d).qk_head_dim, 128);
  EXPECT_TRUE(attention(d).qk_norm && attention(d).qk_norm_across_heads);
  EXPECT_EQ(attention(d).rope.theta, 5e6);
  const RouterSpec& router = d.layers[0].moe()->router;
  EXPECT_EQ(router.num_experts, 256);
  EXPECT_EQ(router.top_k, 8);
  EXPECT_TRUE(router.score == RouterScore::Sigmoid && router.correction_bias && router.renormalize);
  EXPECT_EQ(d.layers[0].moe()->experts.intermediate, 1536);
  const ParameterLayout layout = parameter_layout(d);
  std::vector<std::string> names;
  for (const ParameterSpec& p : layout.parameters) names.push_back(p.pieces[0].name);
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.block_sparse_moe.e_score_correction_bias"),
            names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.self_attn.q_norm.weight"), names.end());
  EXPECT_NE(error_of(R"({"model_type":"minimax_m2","output_router_logits":true})").find("'output_router_logits'"),
            std::string::npos);
}

// What both Gemma generations set: tied by default, the embedding times sqrt(hidden), every norm (each layer's
// and the final one) scaling by 1 + weight.
void expect_gemma_common(const ModelSpec& d, const std::string& architecture, int64_t hidden) {
  EXPECT_EQ(d.architecture, architecture);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.embedding_scale, std::sqrt(double(hidden)));
  EXPECT_EQ(d.final_norm_weight_offset, 1.0f);
  for (const LayerSpec& layer : d.layers)
    for (const SublayerSpec& s : layer.sublayers) EXPECT_EQ(s.norm_weight_offset, 1.0f);
}

// GemmaForCausalLM: GemmaConfig's defaults (1 + weight norms in Llama's layers, the scaled embedding, head_dim 256,
// gelu_pytorch_tanh from hidden_act, tied).
TEST(Families, GemmaConfig) {
  const ModelSpec d = parse(R"({"model_type":"gemma","num_hidden_layers":2,"hidden_size":2048,"num_attention_heads":8,
                                "num_key_value_heads":1})");
  expect_gemma_common(d, "GemmaForCausalLM", 2048);
  for (const SublayerSpec& s : d.layers[1].sublayers) EXPECT_TRUE(s.out_norm.empty());
  EXPECT_EQ(d.layers[0].sublayers[1].mlp()->gate, ops::GateFunction::GeluTanh);
  EXPECT_EQ(attention(d).qk_head_dim, 256);
  EXPECT_EQ(attention(d).softmax_scale(), 1.0 / 16.0);
  EXPECT_FALSE(attention(d).qk_norm);
  EXPECT_EQ(
      parse(R"({"model_type":"gemma","num_hidden_layers":1,"hidden_act":"gelu"})").layers[0].sublayers[1].mlp()->gate,
      ops::GateFunction::Gelu);
  EXPECT_NE(
      error_of(R"({"model_type":"gemma","use_bidirectional_attention":true})").find("use_bidirectional_attention"),
      std::string::npos);
}

// Gemma3ForCausalLM: Gemma3TextConfig's defaults (1 + weight norms around both sublayers, q/k norms, the
// embedding times sqrt(hidden), query_pre_attn_scalar 256, every 6th layer full, thetas 1e6 / 1e4,
// gelu_pytorch_tanh from hidden_activation, tied), the released v4 spelling, and what it refuses by key.
TEST(Families, Gemma3ConfigAndRefusals) {
  const ModelSpec d = parse(R"({"model_type":"gemma3_text","num_hidden_layers":7,"hidden_size":1152,
                                "num_attention_heads":4,"num_key_value_heads":1,"hidden_act":"silu"})");
  expect_gemma_common(d, "Gemma3ForCausalLM", 1152);
  for (const SublayerSpec& s : d.layers[0].sublayers) EXPECT_FALSE(s.norm.empty() || s.out_norm.empty());
  EXPECT_EQ(d.layers[0].sublayers[1].mlp()->gate, ops::GateFunction::GeluTanh);  // hidden_act is not Gemma 3's key
  const AttentionSpec& a = attention(d);
  EXPECT_TRUE(a.qk_norm && !a.qk_norm_across_heads);
  EXPECT_EQ(a.qk_head_dim, 256);
  EXPECT_EQ(a.softmax_scale(), 1.0 / 16.0);
  EXPECT_EQ(a.sliding_window, 4096);
  EXPECT_EQ(a.rope.theta, 10000.0);
  EXPECT_EQ(attention(d, 5).sliding_window, std::nullopt);
  EXPECT_EQ(attention(d, 5).rope.theta, 1e6);
  EXPECT_EQ(attention(d, 6).sliding_window, 4096);
  EXPECT_EQ(*d.pad_token_id, 0);
  EXPECT_EQ(*d.bos_token_id, 2);
  // gemma-3-1b's config.json as transformers v4 wrote it: thetas at the top, linear scaling for the full layers.
  const ModelSpec v4 = parse(R"({"model_type":"gemma3_text","num_hidden_layers":2,"sliding_window_pattern":2,
      "sliding_window":512,"rope_theta":1000000,"rope_local_base_freq":10000,"rope_scaling":{"rope_type":"linear",
      "factor":8.0},"query_pre_attn_scalar":144,"hidden_activation":"gelu_pytorch_tanh"})");
  EXPECT_EQ(attention(v4, 0).sliding_window, 512);
  EXPECT_EQ(attention(v4, 0).rope.type, "default");
  EXPECT_EQ(attention(v4, 1).rope.type, "linear");
  EXPECT_EQ(attention(v4, 1).rope.theta, 1e6);
  EXPECT_EQ(attention(v4, 0).softmax_scale(), 1.0 / 12.0);
  for (const auto& [config, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model_type":"gemma3_text","attn_logit_softcapping":50.0})", "attn_logit_softcapping"},
           {R"({"model_type":"gemma3_text","final_logit_softcapping":30.0})", "final_logit_softcapping"},
           {R"({"model_type":"gemma3_text","use_bidirectional_attention":true})", "use_bidirectional_attention"},
           {R"({"model_type":"gemma3_text","hidden_activation":"tanh"})", "hidden_activation"},
           {R"({"model_type":"gemma3_text","sliding_window_pattern":0})", "sliding_window_pattern"},
           {R"({"model_type":"gemma3_text","rope_parameters":{"rope_type":"linear","factor":8.0}})", "rope_parameters"},
           {R"({"model_type":"gemma3_text","query_pre_attn_scalar":0})", "query_pre_attn_scalar"}})
    EXPECT_NE(error_of(config).find(key), std::string::npos) << config << ": " << error_of(config);
}

// DeepseekV2ForCausalLM: DeepseekV2Config's defaults (V3's latent widths, the greedy softmax router, no
// renormalisation whatever norm_topk_prob says, interleaved RoPE whatever rope_interleave says), the group-limited
// router and its scaling, and what transformers cannot build or the engine does not run refused by key.
TEST(Families, DeepseekV2RouterAndRefusals) {
  const ModelSpec d = parse(R"({"model_type":"deepseek_v2","num_hidden_layers":2,"first_k_dense_replace":1,
                                "num_experts_per_tok":6,"norm_topk_prob":true,"rope_interleave":false})");
  EXPECT_EQ(d.architecture, "DeepseekV2ForCausalLM");
  EXPECT_EQ(d.layers[0].moe(), nullptr);
  const RouterSpec& router = d.layers[1].moe()->router;
  EXPECT_TRUE(router.is_softmax_then_grouped_topk());  // V2-Lite's settings: no groups, no scaling
  EXPECT_EQ(router.num_groups, 1);
  EXPECT_EQ(router.scaling_factor, 1.0);
  EXPECT_EQ(router.num_experts, 64);
  EXPECT_FALSE(router.renormalize);
  EXPECT_EQ(d.layers[1].moe()->shared_expert->mlp.intermediate, 2 * 1407);
  const AttentionSpec& a = attention(d);
  EXPECT_TRUE(a.mla && a.mla->rope_interleave && a.mla->q_lora_rank == 1536);
  EXPECT_EQ(*d.bos_token_id, 1);
  const ModelSpec grouped = parse(R"({"model_type":"deepseek_v2","num_hidden_layers":1,"num_experts_per_tok":6,
      "topk_method":"group_limited_greedy","n_group":8,"topk_group":3,"routed_scaling_factor":16.0,
      "n_routed_experts":160})");
  const RouterSpec& g = grouped.layers[0].moe()->router;
  EXPECT_TRUE(g.is_softmax_then_grouped_topk());
  EXPECT_EQ(g.num_groups, 8);
  EXPECT_EQ(g.topk_groups, 3);
  EXPECT_EQ(g.scaling_factor, 16.0);
  // A greedy router ignores the group keys, as DeepseekV2TopkRouter does.
  EXPECT_EQ(parse(R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"n_group":8,"topk_group":3})")
                .layers[0]
                .moe()
                ->router.num_groups,
            1);
  for (const auto& [config, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model_type":"deepseek_v2"})", "'num_experts_per_tok'"},
           {R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"topk_method":"noaux_tc"})", "topk_method"},
           {R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"topk_method":"group_limited_greedy"})",
            "'n_group'"},
           {R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"topk_method":"group_limited_greedy","n_group":5,
                "topk_group":2})",
            "'n_group' (5)"},
           {R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"n_shared_experts":null})", "'n_shared_experts'"},
           {R"({"model_type":"deepseek_v2","num_experts_per_tok":6,"mlp_bias":true})", "mlp_bias"}})
    EXPECT_NE(error_of(config).find(key), std::string::npos) << config << ": " << error_of(config);
}

// Dots1ForCausalLM: Qwen3's attention with Dots1Config's window rule (max_window_layers, no use_sliding_window) and
// DeepSeek-V3's MoE with Dots1Config's defaults (no renormalisation, scaling 1, one group); the expert counts it
// leaves None are required.
TEST(Families, Dots1WindowsAndMoeDefaults) {
  const ModelSpec d = parse(R"({"model_type":"dots1","num_hidden_layers":3,"n_routed_experts":16,
                                "num_experts_per_tok":4,"n_shared_experts":1,"first_k_dense_replace":1,
                                "sliding_window":64,"max_window_layers":2,"hidden_size":256,"num_attention_heads":4})");
  EXPECT_EQ(d.architecture, "Dots1ForCausalLM");
  EXPECT_TRUE(attention(d).qk_norm);
  EXPECT_EQ(attention(d).qk_head_dim, 64);  // hidden / heads: Dots1Config has no head_dim of its own
  EXPECT_EQ(d.layers[0].moe(), nullptr);
  const RouterSpec& router = d.layers[1].moe()->router;
  EXPECT_TRUE(router.score == RouterScore::Sigmoid && router.correction_bias);
  EXPECT_FALSE(router.renormalize);
  EXPECT_EQ(router.scaling_factor, 1.0);
  EXPECT_EQ(router.num_groups, 1);
  std::vector<std::optional<int64_t>> windows;
  for (const LayerSpec& layer : d.layers) windows.push_back(layer.sublayers[0].attention()->sliding_window);
  EXPECT_EQ(windows, (std::vector<std::optional<int64_t>>{std::nullopt, std::nullopt, 64}));
  // The default window (4096) with the default max_window_layers (62): no layer of a shorter model slides.
  const ModelSpec plain = parse(
      R"({"model_type":"dots1","num_hidden_layers":2,"n_routed_experts":4,"num_experts_per_tok":2,"n_shared_experts":1})");
  for (const LayerSpec& layer : plain.layers) EXPECT_FALSE(layer.sublayers[0].attention()->sliding_window);
  for (const char* key : {"'n_routed_experts'", "'num_experts_per_tok'", "'n_shared_experts'"}) {
    const std::string config = std::string(R"({"model_type":"dots1","n_routed_experts":4,"num_experts_per_tok":2,)") +
                               R"("n_shared_experts":1})";
    json j = json::parse(config);
    j.erase(std::string(key).substr(1, std::string(key).size() - 2));
    EXPECT_NE(error_of(j.dump()).find(key), std::string::npos) << key;
  }
}

// Olmo2ForCausalLM / Olmo3ForCausalLM: norms on the sublayers' outputs and none on their inputs, named as the
// checkpoints name them; OLMo-3's layer types and its RoPE per layer type as Olmo3Config resolves them.
TEST(Families, Olmo2AndOlmo3NormsWindowsAndRope) {
  const ModelSpec olmo2 = parse(R"({"model_type":"olmo2","num_hidden_layers":1})");
  EXPECT_EQ(olmo2.architecture, "Olmo2ForCausalLM");
  const SublayerSpec& attn = olmo2.layers[0].sublayers[0];
  EXPECT_TRUE(attn.norm.empty() && !attn.out_norm.empty());
  EXPECT_TRUE(attention(olmo2).qk_norm_across_heads);
  EXPECT_EQ(olmo2.norm_eps, 1e-5);
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(olmo2).parameters) names.push_back(p.pieces[0].name);
  for (const char* name :
       {"model.layers.0.post_attention_layernorm.weight", "model.layers.0.post_feedforward_layernorm.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(std::find(names.begin(), names.end(), "model.layers.0.input_layernorm.weight"), names.end());

  // Olmo3Config's defaults: every 4th layer full, the rest sliding over 4096; default RoPE at theta 500000 on both,
  // a top-level rope_theta going to the full layers alone.
  const ModelSpec olmo3 = parse(R"({"model_type":"olmo3","num_hidden_layers":4,"rope_theta":20000.0})");
  std::vector<std::optional<int64_t>> windows;
  for (const LayerSpec& layer : olmo3.layers) windows.push_back(layer.sublayers[0].attention()->sliding_window);
  EXPECT_EQ(windows, (std::vector<std::optional<int64_t>>{4096, 4096, 4096, std::nullopt}));
  EXPECT_EQ(olmo3.layers[0].sublayers[0].attention()->rope.theta, 500000.0);
  EXPECT_EQ(olmo3.layers[3].sublayers[0].attention()->rope.theta, 20000.0);
  // The old rope_scaling spelling schedules the full layers only.
  const ModelSpec scaled = parse(R"({"model_type":"olmo3","num_hidden_layers":4,"rope_scaling":{"rope_type":"yarn",
      "factor":8.0,"original_max_position_embeddings":8192},"max_position_embeddings":65536})");
  EXPECT_EQ(scaled.layers[0].sublayers[0].attention()->rope.type, "default");
  EXPECT_EQ(scaled.layers[3].sublayers[0].attention()->rope.type, "yarn");
  // One RoPE dict for every layer is not what Olmo3Config reads: refused, named.
  EXPECT_NE(error_of(R"({"model_type":"olmo3","rope_parameters":{"rope_type":"linear","factor":2.0}})")
                .find("'rope_parameters'"),
            std::string::npos);
}

// Exaone4ForCausalLM: OLMo-2's output norms with per-head q/k norms; Exaone4Config's layer types, the full-attention
// layers without RoPE where a window is set; what its __post_init__ cannot derive refused, named.
TEST(Families, Exaone4LayerTypesAndPositions) {
  const ModelSpec d = parse(R"({"model_type":"exaone4","num_hidden_layers":4,"sliding_window":64})");
  EXPECT_EQ(d.architecture, "Exaone4ForCausalLM");
  EXPECT_TRUE(d.layers[0].sublayers[0].norm.empty() && !d.layers[0].sublayers[1].out_norm.empty());
  const AttentionSpec& sliding = *d.layers[0].sublayers[0].attention();
  const AttentionSpec& full = *d.layers[3].sublayers[0].attention();
  EXPECT_TRUE(sliding.qk_norm && !sliding.qk_norm_across_heads);
  EXPECT_EQ(sliding.sliding_window, 64);
  EXPECT_EQ(sliding.rope.type, "default");
  EXPECT_FALSE(full.sliding_window);
  EXPECT_EQ(full.rope.type, "none");
  // No window: every layer rotates (layer_types must then be written).
  const ModelSpec plain = parse(
      R"({"model_type":"exaone4","num_hidden_layers":2,"sliding_window":null,"layer_types":["full_attention","full_attention"]})");
  EXPECT_EQ(plain.layers[1].sublayers[0].attention()->rope.type, "default");
  for (const auto& [config, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model_type":"exaone4","sliding_window":null})", "'layer_types'"},
           {R"({"model_type":"exaone4","sliding_window_pattern":"LLLG"})", "'sliding_window_pattern'"},
           {R"({"model_type":"exaone4","sliding_window_pattern":0})", "'sliding_window_pattern'"}})
    EXPECT_NE(error_of(config).find(key), std::string::npos) << config << ": " << error_of(config);
}

// ExaoneMoeForCausalLM: EXAONE 4.0's attention in pre-norm layers and DeepSeek-V3's MoE under ExaoneMoeConfig's
// names for the expert counts; the first layer dense by default; the correction bias saved on the block.
TEST(Families, ExaoneMoeNamesAndLayers) {
  const ModelSpec d = parse(R"({"model_type":"exaone_moe","num_hidden_layers":4,"num_experts":16,
                                "num_shared_experts":2,"moe_intermediate_size":64})");
  EXPECT_EQ(d.architecture, "ExaoneMoeForCausalLM");
  EXPECT_EQ(d.layers[0].moe(), nullptr);
  const MoeSpec& moe = *d.layers[1].moe();
  EXPECT_EQ(moe.router.num_experts, 16);
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 128);
  EXPECT_EQ(moe.router.scaling_factor, 2.5);
  EXPECT_FALSE(d.layers[0].sublayers[0].norm.empty());  // pre-norm, unlike EXAONE 4.0
  EXPECT_EQ(d.layers[3].sublayers[0].attention()->rope.type, "none");
  EXPECT_TRUE(d.carries_mtp_layers);
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(d).parameters) names.push_back(p.pieces[0].name);
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.1.mlp.e_score_correction_bias"), names.end());
}

// SolarOpenForCausalLM: SolarOpenConfig's defaults (every layer MoE, RoPE over whole heads at theta 1e6, q/k/v
// biases with attention_bias but none on o_proj); partial RoPE refused (Llama's attention cannot apply it).
TEST(Families, SolarOpenDefaults) {
  const ModelSpec d = parse(R"({"model_type":"solar_open","num_hidden_layers":2,"attention_bias":true})");
  EXPECT_EQ(d.architecture, "SolarOpenForCausalLM");
  for (const LayerSpec& layer : d.layers) EXPECT_NE(layer.moe(), nullptr);
  EXPECT_EQ(attention(d).rope.theta, 1e6);
  EXPECT_EQ(attention(d).rope.partial_rotary_factor, 1.0);
  EXPECT_TRUE(attention(d).qkv_bias && !attention(d).o_bias);
  EXPECT_EQ(d.layers[0].moe()->router.num_experts, 128);
  EXPECT_EQ(d.layers[0].moe()->experts.intermediate, 1280);
  EXPECT_NE(error_of(R"({"model_type":"solar_open","partial_rotary_factor":0.5})").find("'partial_rotary_factor'"),
            std::string::npos);
}

// FlexOlmoForCausalLM: OLMo-2's output-normed layers around OLMoE's MoE layer, FlexOlmoConfig's defaults.
TEST(Families, FlexOlmoOutputNormedMoe) {
  const ModelSpec d = parse(R"({"model_type":"flex_olmo","num_hidden_layers":1,"output_router_logits":true})");
  EXPECT_EQ(d.architecture, "FlexOlmoForCausalLM");
  const SublayerSpec& moe = d.layers[0].sublayers[1];
  ASSERT_NE(moe.moe(), nullptr);
  EXPECT_TRUE(moe.norm.empty() && moe.out_norm == "mlp_out_norm");
  EXPECT_EQ(moe.moe()->router.num_experts, 7);
  EXPECT_EQ(moe.moe()->router.top_k, 5);
  EXPECT_EQ(d.norm_eps, 1e-6);
  EXPECT_EQ(d.aux_loss, AuxLoss::LoadBalancing);
  EXPECT_EQ(*d.pad_token_id, 100277);
  EXPECT_EQ(attention(d).rope.theta, 500000.0);  // FlexOlmoConfig's default_theta
}

// transformers 5.17's decoders never read pretraining_tp (v4's Llama sliced its projections by it into the same
// product): any value is accepted.
TEST(Families, PretrainingTpIsIgnoredAsTransformersIgnoresIt) {
  for (const char* type : {"llama", "qwen3_moe", "deepseek_v3"})
    EXPECT_NO_THROW(describe_model(json{{"model_type", type}, {"pretraining_tp", 2}}, "config.json")) << type;
}

// num_key_value_heads: absent is the family's default, an explicit null the heads (__post_init__ in transformers).
TEST(Families, NullKeyValueHeadsMeansOnePerHead) {
  auto kv = [](const json& config) { return describe_model(config, "config.json").first_attention().num_kv_heads; };
  for (const char* type : {"llama", "qwen3", "mixtral", "gpt_oss"})
    EXPECT_EQ(kv(json{{"model_type", type}, {"num_attention_heads", 16}, {"num_key_value_heads", nullptr}}), 16) << type;
  EXPECT_EQ(kv(json{{"model_type", "qwen3"}, {"num_attention_heads", 64}}), 32);  // Qwen3Config's default
}

// nn.Embedding(vocab, hidden, padding_idx=pad_token_id) in every decoder family but Nemotron-H's: the row whose
// lookup passes no gradient back. A negative id counts from the end; one outside the table is refused, naming it.
TEST(Families, PadTokenIdIsTheEmbeddingsPaddingRow) {
  auto row = [](const json& config) { return describe_model(config, "config.json").embedding_padding_idx; };
  for (const char* type : {"llama", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "deepseek_v3"}) {
    EXPECT_EQ(row(json{{"model_type", type}, {"vocab_size", 100}, {"pad_token_id", 7}}), std::optional<int64_t>(7)) << type;
    EXPECT_EQ(row(json{{"model_type", type}, {"vocab_size", 100}, {"pad_token_id", -1}}), std::optional<int64_t>(99)) << type;
    EXPECT_EQ(row(json{{"model_type", type}, {"vocab_size", 100}, {"pad_token_id", nullptr}}), std::nullopt) << type;
    EXPECT_EQ(row(json{{"model_type", type}, {"vocab_size", 100}}), std::nullopt) << type;
    for (int pad : {100, -101}) {
      const std::string error = error_of(json{{"model_type", type}, {"vocab_size", 100}, {"pad_token_id", pad}}.dump());
      EXPECT_NE(error.find("'pad_token_id'"), std::string::npos) << type << ": " << error;
    }
  }
  EXPECT_EQ(load_model_spec(testing::fixture("nemotron_h_tiny") / "config.json").embedding_padding_idx, std::nullopt);
}

TEST(Families, HostileFilesAreCleanErrors) {
  testing::ScratchDir dir;
  std::filesystem::create_directories(dir / "config.json");  // a folder where the file should be
  try {
    load_model_spec(dir / "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  // A 1 MB model_type is named, not echoed whole.
  const std::string error = error_of(R"({"model_type":")" + std::string(1 << 20, 'x') + R"("})");
  EXPECT_NE(error.find("model_type"), std::string::npos);
  EXPECT_LT(error.size(), 2000u);
}

TEST(Families, EveryFixtureParses) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_tiny", "llama_tiny", "mixtral_tiny",
                           "qwen2_moe_tiny", "gpt_oss_tiny", "gpt_oss_mxfp4_tiny", "deepseek_v3_tiny",
                           "deepseek_v3_qproj_tied", "nemotron_h_tiny", "glm4_moe_tiny", "glm4_moe_quarter_tied"})
    EXPECT_NO_THROW(load_model_spec(testing::fixture(name) / "config.json")) << name;
}

// ERNIE 4.5's config as Ernie4_5_MoeConfig reads it: the MoE layers by start / end / interval (end -1: the last),
// the attribute_map's names, the router's choice bias, interleaved RoPE, the tie on by default; refusals by key.
TEST(Families, Ernie4_5MoeLayersRouterAndRefusals) {
  const ModelSpec spec = parse(R"({"model_type":"ernie4_5_moe","num_hidden_layers":6,"hidden_size":64,
    "num_attention_heads":4,"num_key_value_heads":2,"moe_num_experts":8,"moe_k":2,"moe_intermediate_size":16,
    "moe_layer_start_index":1,"moe_layer_interval":2,"moe_num_shared_experts":2})");
  std::vector<bool> moe;
  for (const LayerSpec& layer : spec.layers) moe.push_back(layer.moe() != nullptr);
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, true, false, true}));
  const MoeSpec& m = *spec.layers[1].moe();
  EXPECT_EQ(m.router.num_experts, 8);
  EXPECT_EQ(m.router.top_k, 2);
  EXPECT_TRUE(m.router.correction_bias && m.router.renormalize && m.router.is_softmax_then_grouped_topk());
  EXPECT_EQ(m.shared_expert->mlp.intermediate, 32);
  EXPECT_TRUE(attention(spec).rope_interleaved);
  EXPECT_EQ(attention(spec).rope.theta, 500000.0);
  EXPECT_TRUE(spec.tie_word_embeddings);
  EXPECT_EQ(parse(R"({"model_type":"ernie4_5_moe","num_hidden_layers":4,"moe_layer_end_index":1})").layers[2].moe(),
            nullptr);
  EXPECT_NE(error_of(R"({"model_type":"ernie4_5_moe","use_bias":true})").find("'use_bias'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"ernie4_5_moe","output_router_logits":true})").find("'output_router_logits'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"ernie4_5_moe","moe_layer_interval":0})").find("'moe_layer_interval'"),
            std::string::npos);
  // The bias is saved on moe_statics as [1, E] and counted as transformers counts its frozen nn.Parameter.
  const ParameterLayout layout = parameter_layout(spec);
  bool found = false;
  for (const ParameterSpec& p : layout.parameters)
    if (p.name == "layers.1.moe.router_correction_bias") {
      found = true;
      EXPECT_EQ(p.pieces[0].name, "model.layers.1.mlp.moe_statics.e_score_correction_bias");
      EXPECT_EQ(p.pieces[0].shape, Shape({1, 8}));
      EXPECT_TRUE(p.counted_buffer);
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(attention(parse(R"({"model_type":"ernie4_5","hidden_size":64,"num_attention_heads":4})")).qk_head_dim,
            128);  // Ernie4_5Config's head_dim default, not hidden / heads
}

// Arcee's ungated MLP: relu² of up_proj (its one projection, the engine's gate_up), biases with mlp_bias; any other
// hidden_act refused by key.
TEST(Families, ArceeReluSquaredMlp) {
  const ModelSpec spec = parse(R"({"model_type":"arcee","hidden_size":64,"num_attention_heads":4,
    "intermediate_size":96,"num_hidden_layers":2,"mlp_bias":true})");
  const MlpSpec& mlp = *spec.layers[0].sublayers[1].mlp();
  EXPECT_EQ(mlp.activation, Activation::ReluSquared);
  EXPECT_TRUE(mlp.bias);
  EXPECT_EQ(attention(spec).qk_head_dim, 16);
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(spec).parameters)
    if (p.name.starts_with("layers.0.mlp."))
      for (const HfTensor& piece : p.pieces) names.push_back(piece.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.bias",
                                      "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.bias"}));
  EXPECT_NE(error_of(R"({"model_type":"arcee","hidden_act":"silu"})").find("'hidden_act'"), std::string::npos);
}

// granite-3.0-1b-a400m's shape, cut: the multipliers land where the engine reads them (the attention multiplier
// is the softmax scale itself, 1.0 when absent), the experts load from the stacked tensors or v5's names, and
// GraniteMoeShared's MLP sits beside the block.
TEST(Families, GraniteMultipliersAndStackedExperts) {
  const ModelSpec dense = parse(R"({"model_type":"granite","hidden_size":64,"num_attention_heads":4,
    "intermediate_size":96,"num_hidden_layers":2})");
  EXPECT_EQ(attention(dense).softmax_scale(), 1.0);
  EXPECT_EQ(dense.layers[1].sublayers[1].residual_scale, 1.0);
  const ModelSpec spec = parse(R"({"model_type":"granitemoeshared","hidden_size":64,"num_attention_heads":4,
    "intermediate_size":32,"num_hidden_layers":2,"num_local_experts":4,"num_experts_per_tok":2,
    "shared_intermediate_size":24,"embedding_multiplier":12.0,"attention_multiplier":0.015625,
    "residual_multiplier":0.22,"logits_scaling":8.0})");
  EXPECT_EQ(attention(spec).softmax_scale(), 0.015625);
  EXPECT_EQ(spec.embedding_scale, 12.0);
  EXPECT_FALSE(spec.embedding_scale_in_activation_dtype);
  EXPECT_EQ(spec.logits_divisor, 8.0);
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) EXPECT_EQ(sublayer.residual_scale, 0.22);
  const MoeSpec& moe = *spec.layers[0].moe();
  EXPECT_TRUE(moe.router.topk_before_softmax);
  EXPECT_FALSE(moe.router.bias);
  EXPECT_EQ(moe.experts.intermediate, 32);
  ASSERT_TRUE(moe.shared_expert);
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 24);
  std::map<std::string, std::vector<std::string>> pieces;
  std::map<std::string, std::string> fused;
  for (const ParameterSpec& p : parameter_layout(spec).parameters)
    if (p.name.starts_with("layers.0.moe.")) {
      for (const HfTensor& piece : p.pieces) pieces[p.name].push_back(piece.name);
      fused[p.name] = p.fused_hf_name;
    }
  const std::string layer = "model.layers.0.";
  EXPECT_EQ(pieces["layers.0.moe.router"], std::vector<std::string>{layer + "block_sparse_moe.router.layer.weight"});
  EXPECT_EQ(fused["layers.0.moe.router"], layer + "block_sparse_moe.router.weight");
  EXPECT_EQ(pieces["layers.0.moe.experts_gate_up"],
            std::vector<std::string>{layer + "block_sparse_moe.input_linear.weight"});
  EXPECT_EQ(fused["layers.0.moe.experts_gate_up"], layer + "block_sparse_moe.experts.gate_up_proj");
  EXPECT_EQ(pieces["layers.0.moe.experts_down"],
            std::vector<std::string>{layer + "block_sparse_moe.output_linear.weight"});
  EXPECT_EQ(pieces["layers.0.moe.shared_gate_up"], std::vector<std::string>{layer + "shared_mlp.input_linear.weight"});
  EXPECT_EQ(pieces["layers.0.moe.shared_down"], std::vector<std::string>{layer + "shared_mlp.output_linear.weight"});
  EXPECT_NE(error_of(R"({"model_type":"granite","logits_scaling":0})").find("'logits_scaling'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"granitemoe","residual_multiplier":null})").find("'residual_multiplier'"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"model_type":"granitemoeshared","shared_intermediate_size":-1})").find("shared_intermediate_size"),
      std::string::npos);
  EXPECT_EQ(parse(R"({"model_type":"granitemoeshared","num_hidden_layers":1})").layers[0].moe()->shared_expert,
            std::nullopt);
}

// GLM-4 (dense): four norms a layer under its own names, q/k/v biases by default and none on o_proj, RoPE on
// interleaved pairs of half of each head (rows reordered to halves on load), one gate_up_proj.
TEST(Families, Glm4SandwichNormsAndInterleavedPartialRope) {
  const ModelSpec spec = parse(R"({"model_type":"glm4","hidden_size":64,"num_attention_heads":4,"head_dim":16,
    "num_key_value_heads":2,"intermediate_size":96,"num_hidden_layers":1,"pad_token_id":0})");
  EXPECT_TRUE(attention(spec).qkv_bias);
  EXPECT_FALSE(attention(spec).o_bias);
  EXPECT_TRUE(attention(spec).rope_interleaved);
  EXPECT_EQ(ops::rope_rotary_dim(attention(spec).rope, 16), 8);
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(spec).parameters)
    if (p.name.starts_with("layers.0.") && p.role == ParameterRole::Norm) names.push_back(p.pieces[0].name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "model.layers.0.input_layernorm.weight", "model.layers.0.post_self_attn_layernorm.weight",
                       "model.layers.0.post_attention_layernorm.weight", "model.layers.0.post_mlp_layernorm.weight"}));
  EXPECT_EQ(parse(R"({"model_type":"glm4","num_hidden_layers":1})").embedding_padding_idx, 151329);
}

// GraniteSWA: every fourth layer from 0 full by default, the others sliding; per-layer RoPE thetas with 0 for none;
// sinks on every layer; GraniteMoeSWA's experts under v5's names.
TEST(Families, GraniteSwaLayers) {
  const ModelSpec spec = parse(R"({"model_type":"granite_swa","hidden_size":64,"num_attention_heads":4,
    "num_key_value_heads":2,"num_hidden_layers":5,"sliding_window":16,"layer_rope_theta":[10000,0,500,10000,10000]})");
  EXPECT_TRUE(spec.tie_word_embeddings);
  EXPECT_EQ(attention(spec, 0).sliding_window, std::nullopt);
  EXPECT_EQ(attention(spec, 1).sliding_window, 16);
  EXPECT_EQ(attention(spec, 4).sliding_window, std::nullopt);
  EXPECT_EQ(attention(spec, 1).rope.type, "none");
  EXPECT_EQ(attention(spec, 2).rope.theta, 500.0);
  EXPECT_TRUE(attention(spec, 3).sinks);
  EXPECT_EQ(spec.eos_token_ids, std::vector<int64_t>{100257});
  const ModelSpec moe = parse(R"({"model_type":"granitemoe_swa","num_hidden_layers":2,"num_local_experts":4})");
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(moe).parameters)
    if (p.name.starts_with("layers.0.moe."))
      for (const HfTensor& piece : p.pieces) names.push_back(piece.name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.block_sparse_moe.router.weight",
                                             "model.layers.0.block_sparse_moe.experts.gate_up_proj",
                                             "model.layers.0.block_sparse_moe.experts.down_proj"}));
  EXPECT_NE(
      error_of(R"({"model_type":"granite_swa","num_hidden_layers":2,"layer_rope_theta":[1]})").find("layer_rope_theta"),
      std::string::npos);
}

// Granite 4.0's hybrid: the layer pattern in either spelling, NoPE unless position_embedding_type is rope, the Mamba2
// mixer's derived head width and whole-width gated norm, time_step_limit as transformers 5 writes infinity, and a
// dense layer's shared MLP under shared_mlp.
TEST(Families, GraniteMoeHybridLayersAndMamba) {
  const ModelSpec spec = parse(R"({"model_type":"granitemoehybrid","hidden_size":64,"num_attention_heads":4,
    "num_hidden_layers":3,"num_local_experts":0,"shared_intermediate_size":24,"mamba_n_heads":8,"mamba_d_state":16,
    "mamba_n_groups":2,"layer_types":["mamba","attention","linear_attention"],"residual_multiplier":0.5,
    "time_step_limit":[0.0,{"__float__":"Infinity"}]})");
  ASSERT_EQ(spec.num_layers(), 3);
  const Mamba2Spec* mamba = spec.layers[0].sublayers[0].mamba2();
  ASSERT_NE(mamba, nullptr);
  EXPECT_EQ(mamba->head_dim, 16);  // "auto": 2 · 64 / 8
  EXPECT_EQ(mamba->norm_group_size(), 128);
  EXPECT_EQ(mamba->chunk_size, 256);
  EXPECT_TRUE(std::isinf(mamba->dt_max));
  EXPECT_EQ(spec.layers[0].sublayers[0].residual_scale, 0.5);
  ASSERT_NE(spec.layers[1].sublayers[0].attention(), nullptr);
  EXPECT_EQ(attention(spec, 1).rope.type, "none");
  EXPECT_NE(spec.layers[2].sublayers[0].mamba2(), nullptr);
  ASSERT_NE(spec.layers[1].sublayers[1].mlp(), nullptr);
  std::vector<std::string> names;
  for (const ParameterSpec& p : parameter_layout(spec).parameters)
    if (p.name.starts_with("layers.0."))
      for (const HfTensor& piece : p.pieces) names.push_back(piece.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.mamba.A_log"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.shared_mlp.input_linear.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.shared_mlp.output_linear.weight"), names.end());
  const ModelSpec roped =
      parse(R"({"model_type":"granitemoehybrid","num_hidden_layers":2,"position_embedding_type":"rope",
    "layers_block_type":["attention","attention"]})");
  EXPECT_EQ(attention(roped).rope.type, "default");
  EXPECT_NE(roped.layers[0].moe(), nullptr);
  ASSERT_TRUE(roped.layers[0].moe()->shared_expert);
  EXPECT_EQ(roped.layers[0].moe()->shared_expert->mlp.intermediate, 1024);
  EXPECT_NE(parse(R"({"model_type":"granitemoehybrid","num_hidden_layers":1})").layers[0].sublayers[0].mamba2(),
            nullptr);
  EXPECT_NE(error_of(R"({"model_type":"granitemoehybrid","num_hidden_layers":1,"layer_types":["sliding_attention"]})")
                .find("layer_types"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"model_type":"granitemoehybrid","num_hidden_layers":1,"mamba_n_heads":7})").find("mamba_n_heads"),
      std::string::npos);
}

// Qwen3-Next: layer types from full_attention_interval, Gated DeltaNet and gated attention sublayers, 1 + weight norms,
// the MoE rule, the grouped projections' rows in the engine's order; Qwen3.5 and Qwen3.5-MoE read the same layers
// with four ungrouped projections; hostile values refused naming their keys.
TEST(Families, Qwen3NextLayersProjectionsAndRefusals) {
  const ModelSpec spec = parse(R"({"model_type":"qwen3_next","num_hidden_layers":4,"hidden_size":64,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"full_attention_interval":2,"num_experts":4,
    "num_experts_per_tok":2,"mlp_only_layers":[1],"linear_num_key_heads":2,"linear_num_value_heads":6,
    "linear_key_head_dim":8,"linear_value_head_dim":4})");
  ASSERT_EQ(spec.num_layers(), 4);
  const GatedDeltaSpec* delta = spec.layers[0].sublayers[0].gated_delta();
  ASSERT_NE(delta, nullptr);
  EXPECT_TRUE(delta->grouped_projections);
  EXPECT_EQ(delta->projection(), 2 * 16 + 2 * 24 + 2 * 6);
  ASSERT_NE(spec.layers[1].sublayers[0].attention(), nullptr);
  EXPECT_TRUE(attention(spec, 1).output_gate && attention(spec, 1).qk_norm);
  EXPECT_EQ(ops::rope_rotary_dim(attention(spec, 1).rope, 16), 4);  // partial_rotary_factor 0.25
  EXPECT_NE(spec.layers[2].sublayers[0].gated_delta(), nullptr);
  EXPECT_EQ(spec.layers[1].moe(), nullptr);  // mlp_only_layers
  ASSERT_NE(spec.layers[0].moe(), nullptr);
  EXPECT_TRUE(spec.layers[0].moe()->router.renormalize && spec.layers[0].moe()->shared_expert->sigmoid_gate);
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) EXPECT_EQ(sublayer.norm_weight_offset, 1.0f);
  EXPECT_EQ(spec.final_norm_weight_offset, 1.0f);
  EXPECT_TRUE(spec.carries_mtp_layers);
  for (const ParameterSpec& p : parameter_layout(spec).parameters) {
    if (p.name == "layers.0.delta.in_proj") {
      ASSERT_EQ(p.pieces.size(), 2u);
      EXPECT_EQ(p.pieces[0].name, "model.layers.0.linear_attn.in_proj_qkvz.weight");
      EXPECT_EQ(p.pieces[0].grouped_rows.segments, (std::vector<int64_t>{8, 8, 12, 12}));
      EXPECT_EQ(p.pieces[1].grouped_rows.segments, (std::vector<int64_t>{3, 3}));
    }
    if (p.name == "layers.1.attn.qkv") {
      EXPECT_EQ(p.pieces[0].shape, Shape({2 * 4 * 16, 64}));  // queries and gates
      EXPECT_EQ(p.pieces[0].grouped_rows.groups, 4);
      EXPECT_EQ(p.pieces[0].partial_rotary.rotated_rows, 4 * 16);  // only the queries rotate
    }
  }
  // Qwen3.5: four projections, a dense MLP everywhere; Qwen3.5-MoE: the MoE everywhere, always renormalised.
  const ModelSpec dense = parse(R"({"model_type":"qwen3_5_text","num_hidden_layers":2,"hidden_size":64,
    "num_attention_heads":4,"head_dim":16,"intermediate_size":96,"layer_types":["linear_attention","full_attention"]})");
  EXPECT_FALSE(dense.layers[0].sublayers[0].gated_delta()->grouped_projections);
  EXPECT_NE(dense.layers[0].sublayers[1].mlp(), nullptr);
  EXPECT_NE(dense.layers[1].sublayers[1].mlp(), nullptr);
  const ModelSpec moe = parse(R"({"model_type":"qwen3_5_moe_text","num_hidden_layers":2,"hidden_size":64,
    "num_attention_heads":4,"head_dim":16,"num_experts":4,"num_experts_per_tok":2,"norm_topk_prob":false,
    "layer_types":["linear_attention","full_attention"]})");
  EXPECT_TRUE(moe.layers[0].moe() && moe.layers[1].moe() && moe.layers[1].moe()->router.renormalize);
  const std::string base =
      R"("model_type":"qwen3_next","num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,)";
  EXPECT_NE(error_of("{" + base + R"("layer_types":["linear_attention"]})").find("'layer_types'"), std::string::npos);
  EXPECT_NE(
      error_of("{" + base + R"("layer_types":["linear_attention","sliding_attention"]})").find("sliding_attention"),
      std::string::npos);
  EXPECT_NE(
      error_of("{" + base + R"("linear_num_key_heads":4,"linear_num_value_heads":6})").find("linear_num_value_heads"),
      std::string::npos);
  EXPECT_NE(error_of("{" + base + R"("full_attention_interval":0})").find("full_attention_interval"),
            std::string::npos);
  EXPECT_NE(error_of("{" + base + R"("hidden_act":"gelu"})").find("hidden_act"), std::string::npos);
}

}  // namespace
}  // namespace moetune::model
