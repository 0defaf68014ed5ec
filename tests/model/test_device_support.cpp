// What only the CPU engine runs is named, so the GPU model refuses a model with the features it lacks instead of
// training something else than transformers does; the families the GPU runs pass.
#include <gtest/gtest.h>

#include <functional>

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

TEST(DeviceSupport, GpuRunsTheSupportedFamilies) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny", "gpt_oss_tiny",
                           "deepseek_v3_tiny", "deepseek_v3_qproj_tied", "nemotron_h_tiny"}) {
    const ModelSpec spec = load_model_spec(testing::fixture(name) / "config.json");
    EXPECT_TRUE(features_missing_on_gpu(spec).empty()) << name;
    EXPECT_NO_THROW(require_gpu_support(spec)) << name;
  }
}

// GPT-OSS's sinks, the sliding-window families' windows, YaRN's scaling and DeepSeek-V3's latent attention run in
// GPU generation too: nothing is missing for them.
TEST(DeviceSupport, GpuGenerationRunsSinksWindowsYarnAndLatentAttention) {
  for (const char* name :
       {"gpt_oss_tiny", "qwen3_sliding_yarn", "mistral_tiny", "mixtral_sliding_dynamic", "qwen2_tiny", "qwen3_moe_tiny",
        "glm4_moe_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied"}) {
    const ModelSpec spec = load_model_spec(testing::fixture(name) / "config.json");
    EXPECT_TRUE(features_missing_for_gpu_generation(spec).empty()) << name;
    EXPECT_NO_THROW(require_gpu_generation_support(spec)) << name;
  }
}

// Nemotron-H trains on the GPU; generation there has no cache for its Mamba2 state yet, and says so.
TEST(DeviceSupport, GpuGenerationRefusesNemotronHNamingWhatIsMissing) {
  const ModelSpec spec = load_model_spec(testing::fixture("nemotron_h_tiny") / "config.json");
  EXPECT_EQ(features_missing_for_gpu_generation(spec),
            std::vector<std::string>({"Mamba2 mixers (in generation: their conv and SSM state cache)"}));
  expect_refusal([&] { require_gpu_generation_support(spec); }, {"NemotronHForCausalLM", "Mamba2", "--device cpu"});
}

}  // namespace
}  // namespace moetune::model
