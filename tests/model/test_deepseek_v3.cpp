// DeepseekV3ForCausalLM: config.json -> description (transformers 5.17's defaults, MLA, YaRN scales, the
// router, dense first layers), refusals that name the key, the correction bias as a frozen buffer,
// multi-token-prediction layers skipped on load and not saved, and the GPU engine's refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "moetune/core/error.h"
#include "moetune/model/causal_lm.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/fp8_dequantize.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// DeepSeek-V3's released config.json (transformers v4 spelling: rope_scaling), trimmed of keys it ignores.
json deepseek_v3_config() {
  return json::parse(R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
  "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
  "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
  "n_routed_experts": 256, "ep_size": 1, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8,
  "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
  "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
  "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "bos_token_id": 0, "eos_token_id": 1})");
}

std::string error_of(const json& config) {
  try {
    describe_model(config, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepseekV3, ReleasedConfigDescribesMlaRouterAndDenseLayers) {
  const ModelSpec spec = describe_model(deepseek_v3_config(), "config.json");
  EXPECT_EQ(spec.family, "deepseek_v3");
  ASSERT_EQ(spec.num_layers(), 61);
  EXPECT_EQ(spec.moe_layer_count(), 58);  // first_k_dense_replace 3
  EXPECT_EQ(spec.layers[2].sublayers[1].mlp()->intermediate, 18432);
  const AttentionSpec& a = *spec.layers[0].sublayers[0].attention();
  ASSERT_TRUE(a.mla);
  EXPECT_EQ(a.qk_head_dim, 192);
  EXPECT_EQ(a.v_head_dim, 128);
  EXPECT_EQ(a.mla->q_lora_rank, 1536);
  EXPECT_TRUE(a.mla->rope_interleave);
  EXPECT_EQ(a.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(a.mla->rope_scale, 1.0);                       // mscale == mscale_all_dim
  EXPECT_NEAR(a.mla->softmax_scale, 0.1352337788608801, 1e-15);  // transformers' self.scaling
  const MoeSpec& moe = *spec.layers[3].moe();
  EXPECT_EQ(moe.router.score, RouterScore::Sigmoid);
  EXPECT_EQ(moe.router.num_groups, 8);
  EXPECT_EQ(moe.router.topk_groups, 4);
  EXPECT_TRUE(moe.router.correction_bias);
  EXPECT_DOUBLE_EQ(moe.router.scaling_factor, 2.5);
  ASSERT_TRUE(moe.shared_expert);
  EXPECT_EQ(moe.shared_expert->mlp.intermediate, 2048);
  EXPECT_FALSE(moe.shared_expert->sigmoid_gate);
  EXPECT_EQ(spec.aux_loss, AuxLoss::None);
}

// Moonlight-16B-A3B's and Kimi-K2's config.json spellings (the keys they add, scoring_func, topk_method,
// aux_loss_alpha, seq_aux, ep_size, moe_layer_freq, are ignored by transformers 5.17 and so here).
TEST(DeepseekV3, MoonlightAndKimiK2ConfigsParse) {
  const ModelSpec moonlight = describe_model(json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 163840,
    "hidden_size": 2048, "intermediate_size": 11264, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
    "ep_size": 1, "routed_scaling_factor": 2.446, "kv_lora_rank": 512, "q_lora_rank": null, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1,
    "num_experts_per_tok": 6, "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": true,
    "scoring_func": "sigmoid", "aux_loss_alpha": 0.001, "seq_aux": true, "hidden_act": "silu",
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 50000.0, "rope_scaling": null,
    "attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "bos_token_id": 163584, "eos_token_id": 163585})"), "config.json");
  EXPECT_EQ(moonlight.moe_layer_count(), 26);
  EXPECT_FALSE(moonlight.layers[0].sublayers[0].attention()->mla->q_lora_rank);
  EXPECT_EQ(moonlight.layers[1].moe()->router.num_groups, 1);
  EXPECT_EQ(moonlight.layers[1].moe()->shared_expert->mlp.intermediate, 2 * 1408);
  EXPECT_NEAR(moonlight.layers[0].sublayers[0].attention()->mla->softmax_scale, 1 / std::sqrt(192.0), 1e-15);

  json kimi = deepseek_v3_config();
  kimi["num_attention_heads"] = kimi["num_key_value_heads"] = 64;
  kimi["n_routed_experts"] = 384;
  kimi["n_group"] = kimi["topk_group"] = 1;
  kimi["first_k_dense_replace"] = 1;
  kimi["rope_scaling"]["factor"] = 32.0;
  kimi["rope_theta"] = 50000.0;
  kimi["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                 {"weight_block_size", {128, 128}}};
  const ModelSpec k2 = describe_model(kimi, "config.json");
  EXPECT_EQ(k2.num_experts(), 384);
  EXPECT_EQ(k2.first_attention().num_heads, 64);
}

TEST(DeepseekV3, NullQLoraRankMeansQProj) {
  json config = deepseek_v3_config();
  config["q_lora_rank"] = nullptr;
  const ModelSpec spec = describe_model(config, "config.json");
  EXPECT_FALSE(spec.layers[0].sublayers[0].attention()->mla->q_lora_rank);
  const ParameterLayout layout = parameter_layout(spec);
  bool has_q = false;
  for (const ParameterSpec& p : layout.parameters) has_q |= p.name == "layers.0.attn.q";
  EXPECT_TRUE(has_q);
}

TEST(DeepseekV3, RefusalsNameTheKey) {
  json config = deepseek_v3_config();
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  EXPECT_NE(error_of(config).find("quantization_config"), std::string::npos);
  config = deepseek_v3_config();
  config["num_key_value_heads"] = 64;
  EXPECT_NE(error_of(config).find("num_key_value_heads"), std::string::npos);
  config = deepseek_v3_config();
  config["rope_scaling"]["type"] = "xpos";
  EXPECT_NE(error_of(config).find("rope_scaling"), std::string::npos);
  config = deepseek_v3_config();
  config["n_group"] = 3;
  EXPECT_NE(error_of(config).find("n_group"), std::string::npos);
  config = deepseek_v3_config();
  config["n_shared_experts"] = 0;
  EXPECT_NE(error_of(config).find("n_shared_experts"), std::string::npos);
}

TEST(DeepseekV3, CorrectionBiasIsAFrozenBufferOutsideTheCounts) {
  const ModelWeights weights = load_checkpoint(testing::fixture("deepseek_v3_tiny"), LoadOptions{DType::F32});
  int buffers = 0;
  for (const ParameterSpec& p : weights.layout.parameters)
    if (p.role == ParameterRole::Buffer) {
      ++buffers;
      EXPECT_FALSE(p.trainable) << p.name;
      EXPECT_TRUE(p.name.ends_with("moe.router_correction_bias")) << p.name;
    }
  EXPECT_EQ(buffers, 2);  // layers 1 and 2
  const json expected = json::parse(testing::read_file(testing::fixture("deepseek_v3_tiny") / "expected.json"));
  EXPECT_EQ(weights.layout.total_parameters(), expected["num_parameters"].get<int64_t>());
}

// A checkpoint carrying layer num_hidden_layers (DeepSeek-V3's MTP module) loads without it and saves without it.
TEST(DeepseekV3, MultiTokenPredictionLayersAreSkippedAndNotSaved) {
  testing::ScratchDir with_mtp, saved;
  const ModelWeights original = load_checkpoint(testing::fixture("deepseek_v3_tiny"));
  io::NamedTensors tensors = to_hf_tensors(original);
  tensors.emplace_back("model.layers.3.eh_proj.weight", Tensor::zeros({24, 48}, DType::F32));
  tensors.emplace_back("model.layers.3.self_attn.q_a_proj.weight", Tensor::zeros({16, 24}, DType::F32));
  io::save_safetensors_folder(with_mtp.path(), tensors);
  std::filesystem::copy_file(testing::fixture("deepseek_v3_tiny") / "config.json", with_mtp / "config.json");
  const ModelWeights loaded = load_checkpoint(with_mtp.path());
  save_checkpoint(loaded, saved.path());
  const io::SafetensorsFolder files = io::SafetensorsFolder::open(saved.path());
  EXPECT_EQ(files.names().size(), tensors.size() - 2);
  for (const std::string& name : files.names()) EXPECT_FALSE(name.starts_with("model.layers.3.")) << name;
}

// The GPU engine runs DeepSeek-V3, Moonlight and Kimi-K2 (384 experts); past its router kernels' 512, named.
// MLA has a key and a value per head whatever num_key_value_heads says. transformers defaults it to 128 when
// absent and to the heads when null, then repeats k/v heads // num_key_value_heads times: fine at 0 or 1 (its sdpa
// path repeats only above 1), broken above. Tiny configs saved with the default therefore carry 128.
TEST(DeepseekV3, KeyValueHeadsAreAcceptedWhereTransformersRunsThem) {
  const std::optional<json> cases[] = {std::nullopt, json(nullptr), json(128), json(256), json(100), json(65)};
  for (const std::optional<json>& kv : cases) {
    json config = deepseek_v3_config();
    if (kv) config["num_key_value_heads"] = *kv;
    else config.erase("num_key_value_heads");
    EXPECT_EQ(describe_model(config, "config.json").first_attention().num_kv_heads, 128) << (kv ? kv->dump() : "absent");
  }
  json tiny = deepseek_v3_config();
  tiny.erase("num_key_value_heads");
  tiny["num_attention_heads"] = 4;
  EXPECT_EQ(describe_model(tiny, "config.json").first_attention().num_kv_heads, 4);  // 4 // 128 = 0 repeats
  tiny["num_key_value_heads"] = 2;
  EXPECT_NE(error_of(tiny).find("'num_key_value_heads'"), std::string::npos);
}

// `bool | None` fields that transformers tests for truth: an explicit null is false, not the default.
TEST(DeepseekV3, ExplicitNullsAreFalseWhereTransformersTestsTruth) {
  json config = deepseek_v3_config();
  config["rope_interleave"] = nullptr;
  config["norm_topk_prob"] = nullptr;
  config["rope_scaling"]["truncate"] = nullptr;
  ModelSpec spec = describe_model(config, "config.json");
  EXPECT_FALSE(spec.first_attention().mla->rope_interleave);
  EXPECT_FALSE(spec.layers[3].moe()->router.renormalize);
  EXPECT_FALSE(spec.first_attention().rope.truncate);
  config.erase("rope_interleave");
  config.erase("norm_topk_prob");
  config["rope_scaling"].erase("truncate");
  spec = describe_model(config, "config.json");
  EXPECT_TRUE(spec.first_attention().mla->rope_interleave);
  EXPECT_TRUE(spec.layers[3].moe()->router.renormalize);
  EXPECT_TRUE(spec.first_attention().rope.truncate);
}

// transformers' `rope_scaling or rope_parameters`: a non-empty rope_scaling wins, an empty one does not; a dict per
// layer type means default RoPE to a config class without layer_types, so it is refused.
TEST(DeepseekV3, RopeScalingWinsOverRopeParametersUnlessEmpty) {
  json config = deepseek_v3_config();
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  ModelSpec spec = describe_model(config, "config.json");
  EXPECT_EQ(spec.first_attention().rope.type, "yarn");
  EXPECT_NEAR(spec.first_attention().mla->softmax_scale, 0.1352337788608801, 1e-15);
  config["rope_parameters"] = config["rope_scaling"];
  config["rope_scaling"] = json::object();
  spec = describe_model(config, "config.json");
  EXPECT_EQ(spec.first_attention().rope.type, "yarn");
  EXPECT_NEAR(spec.first_attention().mla->softmax_scale, 0.1352337788608801, 1e-15);
  config = deepseek_v3_config();
  config["rope_scaling"] = {{"full_attention", config["rope_scaling"]}};
  EXPECT_NE(error_of(config).find("'rope_scaling'"), std::string::npos);
}

// transformers' DeepSeek-V3 runs any RoPE schedule; yarn_apply_mscale grows the softmax scale for every type but
// default when mscale_all_dim is set, and the cos/sin factor is YaRN's alone (1 for linear and llama3).
TEST(DeepseekV3, LinearAndLlama3RopeScaleTheSoftmaxByMscaleAllDim) {
  for (const char* type : {"linear", "llama3"}) {
    json config = deepseek_v3_config();
    config["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}, {"mscale_all_dim", 1.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 4096}};
    const ModelSpec spec = describe_model(config, "config.json");
    const AttentionSpec& a = spec.first_attention();
    EXPECT_EQ(a.rope.type, type);
    EXPECT_DOUBLE_EQ(a.mla->rope_scale, 1.0) << type;
    const double m = 0.1 * std::log(2.0) + 1.0;
    EXPECT_NEAR(a.mla->softmax_scale, m * m / std::sqrt(192.0), 1e-15) << type;
    config["rope_scaling"].erase("mscale_all_dim");
    EXPECT_NEAR(describe_model(config, "config.json").first_attention().mla->softmax_scale, 1 / std::sqrt(192.0), 1e-15);
  }
}

// attribute_map sets n_routed_experts from num_local_experts after the field itself: the alias wins.
TEST(DeepseekV3, NumLocalExpertsWinsOverNRoutedExperts) {
  json config = deepseek_v3_config();
  config["num_local_experts"] = 64;
  EXPECT_EQ(describe_model(config, "config.json").num_experts(), 64);
}

// Past the GPU router kernels' limits the GPU engine refuses at load, naming the key, instead of mid-run.
TEST(DeepseekV3, GpuRefusesRoutersPastItsKernelsNamingTheKey) {
  json config = deepseek_v3_config();
  config["n_group"] = 64;
  config["topk_group"] = 8;
  std::vector<std::string> missing = features_missing_on_gpu(describe_model(config, "config.json"));
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].find("n_group 64"), std::string::npos) << missing[0];
  config = deepseek_v3_config();
  config["num_experts_per_tok"] = 20;
  missing = features_missing_on_gpu(describe_model(config, "config.json"));
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].find("num_experts_per_tok 20"), std::string::npos) << missing[0];
}

TEST(DeepseekV3, GpuEngineRunsItAndKimiK2AndRefusesMoreExpertsThanItsRouter) {
  EXPECT_TRUE(features_missing_on_gpu(describe_model(deepseek_v3_config(), "config.json")).empty());
  // Generation too: the latent attention's GPU KV cache holds each head's expanded k and v.
  EXPECT_TRUE(features_missing_for_gpu_generation(describe_model(deepseek_v3_config(), "config.json")).empty());
  EXPECT_TRUE(features_missing_for_gpu_generation(load_model_spec(testing::fixture("qwen2_moe_tiny") / "config.json")).empty());
  json kimi = deepseek_v3_config();
  kimi["n_routed_experts"] = 384;
  kimi["n_group"] = 1;
  kimi["topk_group"] = 1;
  EXPECT_TRUE(features_missing_on_gpu(describe_model(kimi, "config.json")).empty());
  json wider = kimi;
  wider["n_routed_experts"] = 768;
  try {
    require_gpu_support(describe_model(wider, "config.json"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 512 experts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("DeepseekV3ForCausalLM"), std::string::npos) << e.what();
  }
}

// The aux-loss-free balancing: each bias moves by exactly the rate toward the mean load of the step's tokens.
TEST(DeepseekV3, RouterBiasBalancingMovesEachBiasByTheRateTowardBalance) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture("deepseek_v3_tiny"));
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 24; ++t) ids.push_back((t * 37 + 5) % 96);
  const Tensor batch = Tensor::from_vector(ids, {2, 12});
  model.forward_backward({.input_ids = batch, .labels = batch});
  model.forward_backward({.input_ids = batch, .labels = batch});  // loads add up until the update
  const std::vector<std::vector<double>> load = model.pending_expert_load();
  ASSERT_EQ(load.size(), 2u);  // layers 1 and 2
  const Param bias = model.parameters().get("layers.1.moe.router_correction_bias");
  EXPECT_FALSE(bias.grad.defined());  // frozen
  const std::vector<float> before(bias.value.data<float>(), bias.value.data<float>() + 8);
  double total = 0;
  for (double l : load[0]) total += l;
  EXPECT_EQ(total, 2 * 24 * 3);  // two calls, 24 tokens, top-3
  model.update_router_bias(0.25);
  int moved = 0;
  for (size_t e = 0; e < 8; ++e) {
    const float step = load[0][e] < total / 8 ? 0.25f : load[0][e] > total / 8 ? -0.25f : 0.0f;
    EXPECT_EQ(bias.value.data<float>()[e], before[e] + step) << "expert " << e;
    moved += step != 0;
  }
  EXPECT_GT(moved, 0);
  EXPECT_TRUE(model.pending_expert_load().empty());
}

TEST(Fp8, E4m3BytesDecodeExactly) {
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);                // the largest finite value
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x3d), 1.625f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
}

// Every engine tensor loaded from the FP8 fixture against the state dict transformers 5.17 dequantised it to
// (tests/reference/make_fp8_fixture.py): the same bits.
void expect_dequantized_like_transformers(const ModelWeights& weights, bool buffers_only) {
  const io::SafetensorsFile reference =
      io::SafetensorsFile::open(testing::fixture("deepseek_v3_fp8_tiny") / "dequantized.safetensors");
  const auto& specs = weights.layout.parameters;
  int compared = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if ((specs[i].role == ParameterRole::Buffer) != buffers_only) continue;
    if (!specs[i].fused_hf_name.empty()) {
      EXPECT_TRUE(weights.parameters[i].same_bytes(reference.tensor(specs[i].fused_hf_name))) << specs[i].fused_hf_name;
      ++compared;
      continue;
    }
    int64_t offset = 0;
    for (const HfTensor& piece : specs[i].pieces) {
      const Tensor expected = reference.tensor(piece.name);
      EXPECT_TRUE(weights.parameters[i].flat_slice(offset, piece.shape).same_bytes(expected)) << piece.name;
      offset += expected.numel();
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(Fp8, BlockScaledCheckpointDequantisesBitExactlyLikeTransformers) {
  const auto folder = testing::fixture("deepseek_v3_fp8_tiny");
  const ModelWeights bf16 = load_checkpoint(folder, LoadOptions{DType::BF16});
  expect_dequantized_like_transformers(bf16, /*buffers_only=*/false);
  // transformers keeps the correction bias in fp32 (_keep_in_fp32_modules_strict).
  expect_dequantized_like_transformers(load_checkpoint(folder, LoadOptions{DType::F32}), /*buffers_only=*/true);
  EXPECT_FALSE(bf16.spec().json.contains("quantization_config"));
}

TEST(Fp8, SavedInBf16WithoutScalesAndReloadsTheSameBits) {
  testing::ScratchDir out;
  const ModelWeights loaded = load_checkpoint(testing::fixture("deepseek_v3_fp8_tiny"));  // the checkpoint's dtypes
  save_checkpoint(loaded, out.path());
  const io::SafetensorsFolder files = io::SafetensorsFolder::open(out.path());
  for (const std::string& name : files.names()) {
    EXPECT_FALSE(name.ends_with("_scale_inv")) << name;
    EXPECT_NE(files.entry(name).dtype, DType::F8_E4M3) << name;
  }
  EXPECT_EQ(files.entry("model.layers.0.self_attn.kv_b_proj.weight").dtype, DType::BF16);
  const json config = json::parse(testing::read_file(out / "config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));
  EXPECT_EQ(config["dtype"], "bfloat16");
  const ModelWeights again = load_checkpoint(out.path());
  for (size_t i = 0; i < loaded.parameters.size(); ++i)
    EXPECT_TRUE(again.parameters[i].same_bytes(loaded.parameters[i])) << loaded.layout.parameters[i].name;
}

}  // namespace
}  // namespace moetune::model
