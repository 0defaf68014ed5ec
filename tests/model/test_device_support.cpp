// What only the CPU engine runs is named, so the GPU model refuses GPT-OSS with the features it lacks instead of
// training something else than transformers does; the families the GPU runs pass.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

TEST(DeviceSupport, GpuRefusesGptOssNamingWhatIsMissing) {
  const ModelSpec spec = load_model_spec(testing::fixture("gpt_oss_tiny") / "config.json");
  EXPECT_EQ(features_missing_on_gpu(spec),
            std::vector<std::string>({"attention sinks", "sliding-window attention", "YaRN RoPE",
                                      "the top-k-then-softmax router (with a bias)", "expert biases",
                                      "the clamped SwiGLU experts"}));
  try {
    require_gpu_support(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("GptOssForCausalLM"), std::string::npos) << message;
    EXPECT_NE(message.find("attention sinks"), std::string::npos) << message;
    EXPECT_NE(message.find("on the CPU"), std::string::npos) << message;
  }
}

TEST(DeviceSupport, GpuRunsTheOtherFamilies) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny",
                           "deepseek_v3_tiny", "deepseek_v3_qproj_tied"}) {
    const ModelSpec spec = load_model_spec(testing::fixture(name) / "config.json");
    EXPECT_TRUE(features_missing_on_gpu(spec).empty()) << name;
    EXPECT_NO_THROW(require_gpu_support(spec)) << name;
  }
}

}  // namespace
}  // namespace moetune::model
