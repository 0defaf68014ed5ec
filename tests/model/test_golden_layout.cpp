// Golden files pin, per fixture, the engine's parameter list (names, shapes, roles, the HF tensors each is made
// of) and the GPU activation plan at 8192 tokens, so a refactor of the model description cannot move them
// silently. After an intended change: MOETUNE_WRITE_GOLDEN=1 build/tests/moetune_tests --gtest_filter='Golden*'
// rewrites tests/fixtures/*/golden_layout.json; review the diff before committing it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moetune/model/memory_plan.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using nlohmann::json;

const char* role_name(ParameterRole role) {
  switch (role) {
    case ParameterRole::Embedding: return "embedding";
    case ParameterRole::Norm: return "norm";
    case ParameterRole::Matmul: return "matmul";
    case ParameterRole::Bias: return "bias";
    case ParameterRole::Router: return "router";
    case ParameterRole::Experts: return "experts";
    case ParameterRole::LmHead: return "lm_head";
    case ParameterRole::Buffer: return "buffer";
  }
  return "?";
}

json describe(const std::filesystem::path& folder) {
  const ParameterLayout layout = parameter_layout(load_model_spec(folder / "config.json"));
  json parameters = json::array();
  for (const ParameterSpec& p : layout.parameters) {
    json pieces = json::array();
    for (const HfTensor& piece : p.pieces) pieces.push_back(piece.name + " " + shape_str(piece.shape));
    parameters.push_back({{"name", p.name}, {"shape", shape_str(p.shape)}, {"role", role_name(p.role)},
                          {"hf", pieces}, {"hf_fused", p.fused_hf_name}, {"active", p.active_numel}});
  }
  const ActivationPlan plan = gpu_activation_plan(layout.spec, 8192);
  json stash = json::object();
  for (const auto& [kind, bytes] : plan.stash) stash[kind] = bytes;
  return {{"parameters", parameters},
          {"activation_plan_8192_tokens",
           {{"stash", stash}, {"peak_phase", plan.peak_phase}, {"transient", plan.transient_bytes}, {"workspace", plan.workspace_bytes}}}};
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, ParameterListAndActivationPlanAreUnchanged) {
  const std::filesystem::path folder = testing::fixture(GetParam()), file = folder / "golden_layout.json";
  const json actual = describe(folder);
  if (std::getenv("MOETUNE_WRITE_GOLDEN")) {
    std::ofstream(file) << actual.dump(1) << "\n";
    GTEST_SKIP() << "wrote " << file;
  }
  const json expected = json::parse(testing::read_file(file));
  ASSERT_EQ(actual["parameters"].size(), expected["parameters"].size());
  for (size_t i = 0; i < expected["parameters"].size(); ++i)
    EXPECT_EQ(actual["parameters"][i], expected["parameters"][i]) << "parameter " << i;
  EXPECT_EQ(actual["activation_plan_8192_tokens"], expected["activation_plan_8192_tokens"]);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values("qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_moe_tied_f32", "qwen3_tiny",
                                           "qwen3_f32", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny", "gpt_oss_tiny",
                                           "deepseek_v3_tiny", "deepseek_v3_qproj_tied", "nemotron_h_tiny",
                                           "glm4_moe_tiny", "glm4_moe_lite_tiny", "phi3_tiny", "phi4_mini_tiny",
                                           "smollm3_tiny", "olmoe_tiny", "minimax_m2_tiny", "deepseek_v2_tiny",
                                           "deepseek_v2_grouped", "dots1_tiny", "olmo2_tiny", "olmo3_tiny",
                                           "exaone4_tiny", "solar_open_tiny", "flex_olmo_tiny", "exaone_moe_tiny",
                                           "gemma3_tiny", "gemma_tiny", "ernie4_5_moe_tiny", "granitemoehybrid_tiny",
                                           "granitemoeshared_tiny", "qwen3_next_tiny"));

}  // namespace
}  // namespace moetune::model
