// `moetune inspect` run as a user runs it: the parameter counts agree with transformers' num_parameters()
// (recorded in each fixture's expected.json), and a broken folder is a clean error, not a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moetune {
namespace {

TEST(Inspect, ParameterCountsMatchTransformers) {
  std::vector<std::string> names = testing::model_fixtures();
  names.push_back("gpt_oss_mxfp4_tiny");
  for (const std::string& name : names) {
    testing::RunResult result = testing::run_moetune("inspect --json " + testing::fixture(name).string());
    ASSERT_EQ(result.status, 0) << result.output;
    auto report = nlohmann::json::parse(result.output);
    auto expected = nlohmann::json::parse(testing::read_file(testing::fixture(name) / "expected.json"));
    EXPECT_EQ(report["total_parameters"], expected["num_parameters"]) << name;
    EXPECT_LE(report["active_parameters"].get<int64_t>(), report["total_parameters"].get<int64_t>());
  }
}

// A folder with config.json alone (a model not downloaded yet) is counted and planned from the config, as the same
// folder with its weights is, and the report says so; a folder with weights still checks them.
TEST(Inspect, ConfigAloneIsPlannedFromTheConfig) {
  const testing::ScratchDir dir;
  for (const char* name : {"glm4_moe_tiny", "deepseek_v3_tiny"}) {
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy_file(testing::fixture(name) / "config.json", dir / name / "config.json");
    const testing::RunResult alone = testing::run_moetune("inspect --json " + (dir / name).string());
    ASSERT_EQ(alone.status, 0) << alone.output;
    const auto with_weights =
        nlohmann::json::parse(testing::run_moetune("inspect --json " + testing::fixture(name).string()).output);
    const auto report = nlohmann::json::parse(alone.output);
    EXPECT_EQ(report["weight_files"], 0) << name;
    EXPECT_EQ(report["total_parameters"], with_weights["total_parameters"]) << name;
    EXPECT_EQ(report["memory"], with_weights["memory"]) << name;
    const testing::RunResult text = testing::run_moetune("inspect " + (dir / name).string());
    EXPECT_NE(text.output.find("planned from config.json alone"), std::string::npos) << text.output;
  }
}

TEST(Inspect, ActiveParametersCountTopKExperts) {
  // qwen3_moe_tiny: 2 MoE layers of 4 experts, top-2, each expert 3 x 16 x 32 weights.
  testing::RunResult result = testing::run_moetune("inspect --json " + testing::fixture("qwen3_moe_tiny").string());
  auto report = nlohmann::json::parse(result.output);
  EXPECT_EQ(report["total_parameters"].get<int64_t>() - report["active_parameters"].get<int64_t>(), 2 * 2 * 3 * 16 * 32);
}

TEST(Inspect, TextReportNamesLayersAndMemory) {
  testing::RunResult result = testing::run_moetune("inspect " + testing::fixture("qwen3_moe_tiny").string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("Qwen3MoeForCausalLM"), std::string::npos);
  EXPECT_NE(result.output.find("moe (experts 4, top-2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("dense mlp"), std::string::npos);
  EXPECT_NE(result.output.find("pure_bf16"), std::string::npos);
  EXPECT_NE(result.output.find("layers.0.moe.experts_gate_up"), std::string::npos);
}

// The GPU step's plan: stashes grow with the tokens (linearly, but for a few per-expert counters), and the predicted peak is static + activations for
// each GPU precision. (Its agreement with the measured peak is checked on the GPU by bench/run.sh.)
TEST(Inspect, TokensAddTheGpuActivationPlan) {
  nlohmann::json plans[2];
  for (int i = 0; i < 2; ++i) {
    testing::RunResult result = testing::run_moetune("inspect --json --tokens " + std::to_string(64 << i) + " " +
                                                     testing::fixture("qwen3_moe_tiny").string());
    ASSERT_EQ(result.status, 0) << result.output;
    plans[i] = nlohmann::json::parse(result.output);
  }
  const nlohmann::json& small = plans[0]["gpu_step"];
  const nlohmann::json& large = plans[1]["gpu_step"];
  EXPECT_GT(large["stash_total_bytes"].get<int64_t>(), small["stash_total_bytes"].get<int64_t>());
  EXPECT_LE(large["stash_total_bytes"].get<int64_t>(), 2 * small["stash_total_bytes"].get<int64_t>());
  EXPECT_TRUE(small["stash_bytes"].contains("moe") && small["stash_bytes"].contains("attention")) << small.dump();
  for (const auto& m : plans[0]["memory"]) {
    if (m["precision"].get<std::string>().starts_with("cpu_fp32")) continue;
    EXPECT_EQ(small["predicted_peak_bytes"][m["precision"].get<std::string>()].get<int64_t>(),
              m["total_bytes"].get<int64_t>() + small["activation_bytes"].get<int64_t>());
  }
}

// optimizer.state: int8 beside each precision: a byte per moment element and an F32 absmax per block of 256 of
// each tensor, the rest as the precision keeps it.
TEST(Inspect, PlansEightBitAdamWState) {
  testing::RunResult result = testing::run_moetune("inspect --json " + testing::fixture("qwen3_moe_tiny").string());
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json report = nlohmann::json::parse(result.output);
  const int64_t total = report["total_parameters"];
  int64_t blocks = 0;
  for (const auto& p : report["parameters"]) {
    int64_t numel = 1;
    for (const auto& d : p["shape"]) numel *= d.get<int64_t>();
    blocks += (numel + 255) / 256;
  }
  std::map<std::string, nlohmann::json> plans;
  for (const auto& m : report["memory"]) plans[m["precision"]] = m;
  for (const std::string precision : {"fp32_master", "bf16_stochastic_rounding", "pure_bf16", "cpu_fp32"}) {
    SCOPED_TRACE(precision);
    ASSERT_TRUE(plans.count(precision + "+int8"));
    const nlohmann::json &full = plans[precision], &int8 = plans[precision + "+int8"];
    EXPECT_EQ(int8["optimizer_state_bytes"].get<int64_t>(), 2 * total + 8 * blocks);
    EXPECT_EQ(int8["weights_bytes"], full["weights_bytes"]);
    EXPECT_EQ(int8["master_weights_bytes"], full["master_weights_bytes"]);
    EXPECT_EQ(int8["total_bytes"].get<int64_t>(),
              full["total_bytes"].get<int64_t>() - full["optimizer_state_bytes"].get<int64_t>() + 2 * total + 8 * blocks);
  }
  EXPECT_DOUBLE_EQ(plans["pure_bf16+int8"]["bytes_per_parameter"].get<double>(), 6 + 8.0 / 256);
}

TEST(Inspect, BrokenFolderIsACleanError) {
  testing::ScratchDir dir;
  testing::RunResult result = testing::run_moetune("inspect " + dir.path().string());
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.output.find("moetune: error:"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("config.json"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace moetune

namespace moetune {
namespace {

// The per-rank plan under expert parallelism: each rank holds the dense parameters and its share of the
// experts, with the optimizer state sharded over all ranks (ZeRO-2), and the all-to-all's receive rows.
TEST(InspectExpertParallel, PerRankPlan) {
  const testing::RunResult result = testing::run_moetune(
      "inspect " + testing::fixture("qwen3_moe_tiny").string() + " --expert-parallel 2 --world-size 4 --tokens 64 --json");
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json report = nlohmann::json::parse(result.output);
  const nlohmann::json& plan = report["expert_parallel"];
  const int64_t total = report["total_parameters"];
  const int64_t dense = plan["dense_parameters"], experts = plan["expert_parameters_per_rank"];
  EXPECT_EQ(dense + 2 * experts, total);
  EXPECT_GE(int64_t(plan["optimizer_state_parameters_per_rank"]), total / 4);
  // 64 tokens, top-2 of 4 experts, 2 per rank: each rank receives at most every token of its 2-rank group, on
  // average those with one of their 2 experts among its 2 (1 - C(2,2)/C(4,2) = 5/6 of them).
  EXPECT_EQ(plan["receive_rows_worst"], 2 * 64);
  EXPECT_EQ(plan["receive_rows_balanced"], 107);  // 128 · 5/6 = 106.7
  EXPECT_EQ(plan["expert_rows_balanced"], 64 * 2);
  EXPECT_EQ(plan["expert_rows_worst"], 2 * 64 * 2);
  const testing::RunResult bad =
      testing::run_moetune("inspect " + testing::fixture("qwen3_moe_tiny").string() + " --expert-parallel 3");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("parallel.expert 3 does not divide"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace moetune
