// What only the CPU engine runs is named, so the GPU model refuses a model with the features it lacks instead of
// training something else than transformers does; the families the GPU runs pass.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "moetune/core/error.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

// `refuse` throws, and its message holds every one of `phrases`.
void expect_refusal(const std::function<void()>& refuse, std::initializer_list<const char*> phrases) {
  try {
    refuse();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* phrase : phrases) EXPECT_NE(message.find(phrase), std::string::npos) << message;
  }
}

// Every model fixture runs on the GPU, and GPT-OSS's sinks, the sliding-window families' windows, YaRN's scaling,
// DeepSeek-V3's latent attention, Nemotron-H's Mamba2 mixers and Qwen3-Next's Gated DeltaNet run in GPU generation
// too: generation lacks nothing the GPU engine trains.
TEST(DeviceSupport, GpuTrainsAndGeneratesEveryFixture) {
  for (const std::string& name : testing::model_fixtures()) {
    const ModelSpec spec = load_model_spec(testing::fixture(name) / "config.json");
    EXPECT_EQ(features_missing_on_gpu(spec), std::vector<std::string>{}) << name;
    EXPECT_EQ(features_missing_for_gpu_generation(spec), std::vector<std::string>{}) << name;
    EXPECT_NO_THROW(require_gpu_support(spec)) << name;
    EXPECT_NO_THROW(require_gpu_generation_support(spec)) << name;
  }
}

// The GPU routers rank groups one lane a group: DeepSeek-V2's group-limited router past 32 groups is refused by
// its key when the model loads.
TEST(DeviceSupport, GpuRefusesMoreGroupsThanItsRouterRanksNamingThem) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(testing::fixture("deepseek_v2_grouped") / "config.json"));
  config["n_routed_experts"] = 128;
  config["n_group"] = 64;
  const ModelSpec spec = describe_model(config, "config.json");
  expect_refusal([&] { require_gpu_support(spec); }, {"DeepseekV2ForCausalLM", "n_group 64", "--device cpu"});
}

// What the GPU engine does not train it does not generate with either, and generation says what is missing.
TEST(DeviceSupport, GpuGenerationRefusesWhatTheGpuDoesNotTrainNamingIt) {
  nlohmann::json config = nlohmann::json::parse(testing::read_file(testing::fixture("qwen3_moe_tiny") / "config.json"));
  config["num_experts"] = config["num_local_experts"] = 600;  // the fixture spells it num_local_experts
  const ModelSpec spec = describe_model(config, "config.json");
  EXPECT_EQ(features_missing_for_gpu_generation(spec), features_missing_on_gpu(spec));
  expect_refusal([&] { require_gpu_generation_support(spec); },
                 {"Qwen3MoeForCausalLM", "more than 512 experts", "--device cpu"});
}

}  // namespace
}  // namespace moetune::model
