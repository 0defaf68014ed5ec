// Model FLOPs per token as DESIGN.md §5 and bench/model_flops.py count them, on the reference job's model.
#include <gtest/gtest.h>

#include "moetune/model/model_description.h"
#include "moetune/model/model_flops.h"

namespace moetune::model {
namespace {

TEST(ModelFlops, ReferenceJobMatchesTheBenchmarkCount) {
  // Qwen3-30B-A3B cut to 4 layers (the benchmark's reference model), rows of 4096 tokens.
  const ModelSpec spec = describe_model(nlohmann::json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 768, "intermediate_size": 6144, "decoder_sparse_step": 1, "norm_topk_prob": true,
    "vocab_size": 151936, "tie_word_embeddings": false, "mlp_only_layers": []})"), "config.json");
  const ParameterLayout layout = parameter_layout(spec);
  // python3 -c "import model_flops; print(model_flops.flops_per_token(config, 4096))" in bench/:
  // {'active_matmul_params': 538705920, 'flops_per_token': 3634888704}, DESIGN.md's 3.63 GFLOP.
  EXPECT_EQ(layout.active_matmul_parameters(), 538705920);
  EXPECT_EQ(training_flops_per_token(layout, 4096), 3634888704.0);
}

}  // namespace
}  // namespace moetune::model
