#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/io/hf_config.h"
#include "moetune/model/parameter_layout.h"
#include "test_util.h"

namespace moetune::io {
namespace {

using nlohmann::json;

ModelConfig parse(const std::string& text) { return parse_config(json::parse(text), "config.json"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Qwen3-30B-A3B's config.json as transformers v4 wrote it.
const char* kQwen3MoeV4 = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
  "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
  "decoder_sparse_step": 1, "norm_topk_prob": true, "router_aux_loss_coef": 0.001, "rope_theta": 1000000.0,
  "rope_scaling": null, "rms_norm_eps": 1e-06, "max_position_embeddings": 40960, "vocab_size": 151936,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "mlp_only_layers": [], "use_sliding_window": false,
  "sliding_window": null, "max_window_layers": 48, "bos_token_id": 151643, "eos_token_id": 151645})";

TEST(HfConfig, Qwen3MoeV4Spelling) {
  ModelConfig c = parse(kQwen3MoeV4);
  EXPECT_EQ(c.family, Family::Qwen3Moe);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
}

TEST(HfConfig, Qwen3MoeV5Spelling) {
  ModelConfig c = parse(R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":64,"num_hidden_layers":4,
    "num_attention_heads":4,"num_local_experts":16,"rope_parameters":{"rope_type":"default","rope_theta":5000.0},
    "dtype":"float32","mlp_only_layers":[2],"decoder_sparse_step":1})");
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.rope.theta, 5000.0);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(c.head_dim, 16);  // Qwen3-MoE's default: hidden / heads
  EXPECT_EQ(c.num_key_value_heads, 4);  // Qwen3MoeConfig's default
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
}

TEST(HfConfig, DecoderSparseStep) {
  ModelConfig c = parse(R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
    "num_experts":4,"num_experts_per_tok":2,"decoder_sparse_step":2})");
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
}

TEST(HfConfig, Qwen3Defaults) {
  ModelConfig c = parse(R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":true,"use_sliding_window":true})");
  EXPECT_EQ(c.head_dim, 128);  // Qwen3Config's default is 128, not hidden / heads
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_FALSE(c.is_moe());
}

TEST(HfConfig, LlamaV4RopeScalingAndDefaults) {
  ModelConfig c = parse(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":8,"num_key_value_heads":null,"rope_theta":500000.0,
    "rope_scaling":{"type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                    "original_max_position_embeddings":8192},"mlp_bias":true})");
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.vocab_size, 32000);
}

TEST(HfConfig, IntegersWrittenAsWholeFloats) {
  EXPECT_EQ(parse(R"({"model_type":"llama","hidden_size":64.0,"num_attention_heads":4})").hidden_size, 64);
}

TEST(HfConfig, UnknownArchitectureListsTheSupportedOnes) {
  std::string error = error_of(R"({"architectures":["MixtralForCausalLM"]})");
  EXPECT_NE(error.find("config.json"), std::string::npos);
  EXPECT_NE(error.find("'MixtralForCausalLM'"), std::string::npos);
  for (const auto& name : supported_architectures()) EXPECT_NE(error.find(name), std::string::npos) << error;
}

TEST(HfConfig, BadValuesNameTheKey) {
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":"big"})").find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64.5})").find("'hidden_size'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","tie_word_embeddings":"yes"})").find("'tie_word_embeddings'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":3})")
                .find("'num_key_value_heads'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_experts":4,"num_experts_per_tok":8})").find("'num_experts_per_tok'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3_moe","num_hidden_layers":2,"mlp_only_layers":[5]})").find("'mlp_only_layers'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_act":"gelu"})").find("'hidden_act'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","dtype":"float7"})").find("'dtype'"), std::string::npos);
  EXPECT_NE(error_of(R"([1,2])").find("not a JSON object"), std::string::npos);
}

TEST(HfConfig, EveryFixtureParses) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_tiny", "llama_tiny"})
    EXPECT_NO_THROW(load_config(testing::fixture(name) / "config.json")) << name;
}

}  // namespace
}  // namespace moetune::io
