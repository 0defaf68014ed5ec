// What only the CPU engine runs is named, so the GPU model refuses GPT-OSS with the features it lacks instead of
// training something else than transformers does; the families the GPU runs pass.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/model/device_support.h"
#include "moetune/model/model_description.h"
#include "test_util.h"

namespace moetune::model {
namespace {

// require_gpu_support's error names the architecture and a missing feature, and says how to train it anyway.
void expect_refused(const ModelSpec& spec, const std::string& architecture, const std::string& feature) {
  try {
    require_gpu_support(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(architecture), std::string::npos) << message;
    EXPECT_NE(message.find(feature), std::string::npos) << message;
    EXPECT_NE(message.find("on the CPU"), std::string::npos) << message;
  }
}

TEST(DeviceSupport, GpuRefusesGptOssNamingWhatIsMissing) {
  const ModelSpec spec = load_model_spec(testing::fixture("gpt_oss_tiny") / "config.json");
  EXPECT_EQ(features_missing_on_gpu(spec),
            std::vector<std::string>({"attention sinks", "sliding-window attention", "YaRN RoPE",
                                      "the top-k-then-softmax router (with a bias)", "expert biases",
                                      "the clamped SwiGLU experts"}));
  expect_refused(spec, "GptOssForCausalLM", "attention sinks");
}

// Nemotron-H runs on the CPU only until its Mamba2 ops and blocks have passed on a GPU.
TEST(DeviceSupport, GpuRefusesNemotronHNamingWhatIsMissing) {
  const ModelSpec spec = load_model_spec(testing::fixture("nemotron_h_tiny") / "config.json");
  EXPECT_EQ(features_missing_on_gpu(spec),
            std::vector<std::string>({"Mamba2 mixers (the chunked selective scan, its conv and gated norm)",
                                      "the sigmoid group-limited router (n_group / topk_group, e_score_correction_bias)",
                                      "relu² experts", "a relu² shared expert", "latent MoE (moe_latent_size)",
                                      "attention without RoPE", "relu² MLPs"}));
  expect_refused(spec, "NemotronHForCausalLM", "Mamba2");
}

TEST(DeviceSupport, GpuRunsTheOtherFamilies) {
  for (const char* name : {"qwen3_moe_tiny", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny"}) {
    const ModelSpec spec = load_model_spec(testing::fixture(name) / "config.json");
    EXPECT_TRUE(features_missing_on_gpu(spec).empty()) << name;
    EXPECT_NO_THROW(require_gpu_support(spec)) << name;
  }
}

}  // namespace
}  // namespace moetune::model
