// The LoRA commands as a user runs them: `moetune merge BASE ADAPTER OUT` writes a merged HF folder that loads;
// `moetune inspect --lora-rank ...` counts what LoRA trains and plans its memory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/model/causal_lm.h"
#include "test_util.h"

namespace moetune {
namespace {

TEST(LoraCli, MergeWritesAnHfFolderThatLoads) {
  testing::ScratchDir dir;
  const std::string base = testing::fixture("qwen3_moe_tiny").string();
  const std::string adapter = (testing::fixture("qwen3_moe_tiny_lora") / "adapter").string();
  const testing::RunResult result = testing::run_moetune("merge " + base + " " + adapter + " " + (dir / "merged").string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "merged" / "config.json"));
  const io::SafetensorsFile reference =
      io::SafetensorsFile::open(testing::fixture("qwen3_moe_tiny_lora") / "lora_parity.safetensors");
  model::CausalLM merged = model::CausalLM::from_pretrained(dir / "merged");
  const Tensor logits = merged.forward(reference.tensor("input_ids")), expected = reference.tensor("merged.logits");
  double worst = 0;
  for (int64_t i = 0; i < logits.numel(); ++i)
    worst = std::max(worst, double(std::fabs(logits.data<float>()[i] - expected.data<float>()[i])));
  EXPECT_LT(worst, 1e-4);
  EXPECT_NE(testing::run_moetune("merge " + base + " " + base + " " + (dir / "bad").string()).status, 0);  // no adapter there
}

TEST(LoraCli, InspectCountsTheAdapters) {
  const testing::RunResult result = testing::run_moetune(
      "inspect " + testing::fixture("qwen3_moe_tiny").string() +
      " --json --lora-rank 4 --lora-target-modules q_proj v_proj --lora-target-parameters mlp.experts.gate_up_proj");
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json lora = nlohmann::json::parse(result.output)["lora"];
  // 3 layers × (q: 4·32 + 32·4, v: 4·32 + 16·4) + 2 MoE layers × gate_up (A [4 experts · 4, 32], B [32, 16]).
  EXPECT_EQ(lora["trainable_parameters"].get<int64_t>(), 3 * (256 + 192) + 2 * (512 + 512));
  for (const nlohmann::json& m : lora["memory"])
    EXPECT_LT(m["qlora_nf4_total_bytes"].get<int64_t>(), m["total_bytes"].get<int64_t>());
}

}  // namespace
}  // namespace moetune
