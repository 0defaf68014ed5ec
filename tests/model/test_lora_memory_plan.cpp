// The memory plan of LoRA and QLoRA on the GPU engine (model/lora_memory_plan.h) on the benchmark's model, the
// Qwen3-30B-A3B architecture (48 layers), rank 16 on q/k/v/o and the experts, rows of 4096 tokens.
#include <gtest/gtest.h>

#include "moetune/model/lora_config.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/model_description.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/train/micro_batch_fit.h"

namespace moetune::model {
namespace {

ParameterLayout qwen3_30b_a3b(int layers) {
  return parameter_layout(describe_model(nlohmann::json::parse(fmt::format(R"({{
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": {},
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 768, "intermediate_size": 6144, "decoder_sparse_step": 1, "norm_topk_prob": true,
    "vocab_size": 151936, "tie_word_embeddings": false, "mlp_only_layers": []}})", layers)), "config.json"));
}

LoraConfig rank16() {
  LoraConfig config;
  config.rank = 16;
  config.alpha = 32;
  config.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  config.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return config;
}

TEST(LoraMemoryPlan, AdaptersStashUnlessRecomputed) {
  const ParameterLayout layout = with_lora(qwen3_30b_a3b(48), rank16());
  int64_t trainable = 0;
  for (const ParameterSpec& p : layout.parameters) trainable += p.trainable ? shape_numel(p.shape) : 0;
  EXPECT_GT(trainable, 0);
  EXPECT_LT(trainable, layout.total_parameters() / 40);  // 2.1%: per-expert adapters on 128 experts
  const int64_t T = 4096, r = 16;
  // Per layer: q, k, v and o keep T·r each; gate_up and down T·top_k·r each; bf16.
  const int64_t attention = 4 * T * r * 2, experts = 2 * T * 8 * r * 2;
  EXPECT_EQ(lora_gpu_stash_bytes(layout, r, T, Recompute::None), 48 * (attention + experts));
  EXPECT_EQ(lora_gpu_stash_bytes(layout, r, T, Recompute::Experts), 48 * attention);
  EXPECT_EQ(lora_gpu_stash_bytes(layout, r, T, Recompute::Attention), 48 * experts);
  EXPECT_EQ(lora_gpu_stash_bytes(layout, r, T, Recompute::Full), 0);
  EXPECT_EQ(lora_gpu_stash_bytes(layout, r, T, Recompute::Experts, 10), 48 * attention + 10 * experts) << "keep 10 layers";
}

TEST(LoraMemoryPlan, Nf4BaseHoldsHalfAByteAWeightAndOneLayersScratch) {
  const ParameterLayout layout = with_lora(qwen3_30b_a3b(48), rank16());
  const Nf4BasePlan base = nf4_base_plan(layout);
  int64_t quantized = 0;
  for (const ParameterSpec& p : layout.parameters) quantized += quantized_by_qlora(p) && !p.trainable ? shape_numel(p.shape) : 0;
  EXPECT_EQ(base.quantized_parameters, quantized);
  EXPECT_NEAR(double(base.nf4_bytes) / double(quantized), 0.5 + 1.0 / 64, 1e-3);
  // One layer: qkv 5120×2048, o 2048×4096, the experts 128×(1536×2048 + 2048×768); bf16.
  EXPECT_EQ(base.scratch_bytes, 2 * (5120 * 2048 + 2048 * 4096 + int64_t(128) * (1536 * 2048 + 2048 * 768)));
}

TEST(LoraMemoryPlan, PeaksOfTheBenchmark) {
  const ParameterLayout full = qwen3_30b_a3b(48), lora = with_lora(full, rank16());
  const PrecisionPlan& bf16 = train::precision_plan("pure_bf16", "fp32");
  auto gb = [](int64_t bytes) { return double(bytes) / 1e9; };
  const int64_t T = 4096;
  const int64_t full_ft = train::planned_peak_bytes(full, bf16, T, Recompute::None);
  const int64_t none = train::planned_peak_bytes(lora, bf16, T, Recompute::None, false, {16, false});
  const int64_t experts = train::planned_peak_bytes(lora, bf16, T, Recompute::Experts, false, {16, false});
  const int64_t keep10 = train::planned_peak_bytes(lora, bf16, T, Recompute::Experts, false, {16, false}, 10);
  const int64_t qlora = train::planned_peak_bytes(lora, bf16, T, Recompute::None, false, {16, true});
  const int64_t qlora_experts = train::planned_peak_bytes(lora, bf16, T, Recompute::Experts, false, {16, true});
  const int64_t qlora_full = train::planned_peak_bytes(lora, bf16, T, Recompute::Full, false, {16, true});
  std::printf("48 layers, 4096 tokens: full fine-tune %.1f GB; LoRA r16 %.1f GB, recompute experts %.1f GB (keeping the last "
              "10 layers' %.1f GB); QLoRA %.1f GB, recompute experts %.1f GB, full %.1f GB\n",
              gb(full_ft), gb(none), gb(experts), gb(keep10), gb(qlora), gb(qlora_experts), gb(qlora_full));
  const ActivationPlan activations = gpu_activation_plan(lora.spec, T, Recompute::Full);
  std::printf("  activations with full recomputation: stash %.2f GB, transient %.2f GB (%s), workspaces %.2f GB\n",
              gb(activations.stash_bytes), gb(activations.transient_bytes), activations.peak_phase.c_str(),
              gb(activations.workspace_bytes));
  EXPECT_LT(double(none), double(full_ft) / 2.5);
  EXPECT_LT(experts, int64_t(78.5e9)) << "HF + PEFT's peak";
  EXPECT_LT(keep10, int64_t(78.5e9));
  EXPECT_GT(keep10, experts + 10 * int64_t(0.3e9)) << "ten MoE stashes back";
  EXPECT_LT(qlora, none - int64_t(40e9)) << "1.5 of bf16's 2 bytes saved on ~30 G weights";
  EXPECT_LT(qlora_full, qlora_experts);
}

}  // namespace
}  // namespace moetune::model
