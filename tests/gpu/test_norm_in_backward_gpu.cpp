// The clipping norm's partials started in the backward pass (train/cuda/overlapped_grad_norm.h, one rank,
// optimizer.norm_in_backward on) change nothing but the time: the trainer's tiny job, clipped hard so that
// every step's update depends on the norm's bits, gives the same losses, gradient norms and saved weights, bit
// for bit, with it on and off: with and without gradient accumulation, tied embeddings (their gradient is final
// only at the end), DeepSeek-V3, recomputation, LoRA (frozen parameters have no gradient) and the lazy embedding
// update (its gradient read in its marked rows only).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "moetune/io/safetensors.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

// The optimizer's phase where the experts' GEMM sums are added in (train/cuda/gpu_engine.cpp).
constexpr const char* kExpertSumsPhase = "optimizer.norm (experts' sums from their GEMMs)";

class NormInBackwardGpu : public testing::GpuTrainerTest {
 protected:
  // Runs the job with the overlap on and off and compares them; `extra` adds recipe overrides.
  void expect_same_runs(const std::string& name, std::vector<std::string> extra) {
    SCOPED_TRACE(name);
    // The experts' GEMM sums (optimizer.norm_from_expert_gemms) are other partial sums: off on both sides here.
    extra.insert(extra.end(), {"training.device=cuda", "optimizer.max_grad_norm=0.01", "training.profile=true",
                               "optimizer.norm_from_expert_gemms=off"});
    std::vector<train::TrainResult> results;
    for (const std::string overlap : {"false", "true"}) {
      std::vector<std::string> overrides = extra;
      overrides.push_back(std::string("optimizer.norm_in_backward=") + (overlap == "true" ? "on" : "off"));
      results.push_back(train::Trainer(recipe(name + "_" + overlap, overrides), {}, false).run());
      ASSERT_EQ(results.back().steps, 6);
    }
    const std::vector<nlohmann::json> off = steps(metrics(name + "_false")), on = steps(metrics(name + "_true"));
    ASSERT_EQ(off.size(), 6u);
    ASSERT_EQ(on.size(), 6u);
    for (size_t i = 0; i < off.size(); ++i) {
      std::printf("%s step %zu: loss %.6f grad_norm %.9g (on: %.6f %.9g)\n", name.c_str(), i + 1, off[i]["loss"].get<double>(),
                  off[i]["grad_norm"].get<double>(), on[i]["loss"].get<double>(), on[i]["grad_norm"].get<double>());
      EXPECT_EQ(on[i]["loss"].get<double>(), off[i]["loss"].get<double>()) << "step " << i + 1;
      EXPECT_EQ(on[i]["grad_norm"].get<double>(), off[i]["grad_norm"].get<double>()) << "step " << i + 1;
      EXPECT_GT(off[i]["grad_norm"].get<double>(), 0.01) << "step " << i + 1 << " not clipped";
    }
    expect_same_files(results[1].final_model, results[0].final_model);
    // The overlap ran (its own stream's phase is in the profile) only where asked.
    EXPECT_TRUE(profiled(name + "_true", "grad_norm.partials (own stream)"));
    EXPECT_FALSE(profiled(name + "_false", "grad_norm.partials (own stream)"));
  }

  static std::vector<nlohmann::json> steps(const std::vector<nlohmann::json>& records) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& r : records)
      if (r.contains("grad_norm")) out.push_back(r);
    return out;
  }

  // Every tensor of every safetensors file of the saved model (or adapter), byte for byte.
  static void expect_same_files(const std::filesystem::path& actual, const std::filesystem::path& expected) {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(expected)) {
      if (entry.path().extension() != ".safetensors") continue;
      ++files;
      const io::SafetensorsFile a = io::SafetensorsFile::open(actual / entry.path().filename());
      const io::SafetensorsFile b = io::SafetensorsFile::open(entry.path());
      ASSERT_EQ(a.entries().size(), b.entries().size());
      for (const io::SafetensorsEntry& tensor : b.entries())
        EXPECT_TRUE(a.tensor(tensor.name).same_bytes(b.tensor(tensor.name))) << tensor.name;
    }
    EXPECT_GT(files, 0);
  }

  bool profiled(const std::string& output, const std::string& phase) {
    const nlohmann::json profile = nlohmann::json::parse(testing::read_file(dir_ / output / "profile.json"));
    for (const nlohmann::json& p : profile["phases"])
      if (p["phase"] == phase) return true;
    return false;
  }
};

TEST_F(NormInBackwardGpu, SameBitsWithAndWithoutAccumulation) {
  expect_same_runs("accumulate_2", {});  // the fixture's job: 2 micro-batches a step
  expect_same_runs("accumulate_1", {"training.gradient_accumulation_steps=1"});
}

TEST_F(NormInBackwardGpu, SameBitsWithTiedEmbeddingsDeepseekRecomputeAndLora) {
  expect_same_runs("tied", {"model=" + testing::fixture("qwen3_moe_tied_bf16").string()});
  expect_same_runs("deepseek", {"model=" + testing::fixture("deepseek_v3_tiny").string()});
  expect_same_runs("recompute", {"training.recompute=full", "training.gradient_accumulation_steps=1"});
  expect_same_runs("lora", {"lora.rank=8", "lora.alpha=16", "lora.target_modules=[q_proj, o_proj]", "optimizer.lr=2e-3"});
}

// optimizer.lazy_embedding: the embedding's gradient is then left out of the backward pass's partials and read at
// the optimizer's turn in its step's rows only.
TEST_F(NormInBackwardGpu, SameBitsWithTheLazyEmbedding) {
  expect_same_runs("lazy", {"optimizer.lazy_embedding=auto"});
  expect_same_runs("lazy_accumulate_1", {"optimizer.lazy_embedding=auto", "training.gradient_accumulation_steps=1"});
}

// optimizer.norm_from_expert_gemms (model/cuda/expert_norm_partials.h): with one micro-batch a step the experts'
// weight-gradient GEMMs sum the squares they write and the norm's pass leaves those gradients out. The norm is
// then the same squares in other partial sums: within 1e-6 of the pass's at step 1 (the same gradients), and the
// same bits from run to run. With two micro-batches a step nothing is summed there (the pass reads them all).
TEST_F(NormInBackwardGpu, ExpertGemmsSumTheirSquares) {
  std::map<std::string, std::filesystem::path> saved;
  const auto run = [&](const std::string& name, const std::string& setting, const std::string& accumulation) {
    saved[name] = train::Trainer(recipe(name, {"training.device=cuda", "optimizer.max_grad_norm=0.01",
                                               "training.profile=true", "optimizer.norm_from_expert_gemms=" + setting,
                                               "training.gradient_accumulation_steps=" + accumulation}),
                                 {}, false)
                      .run()
                      .final_model;
    return steps(metrics(name));
  };
  const std::vector<nlohmann::json> off = run("gemm_off", "off", "1"), on = run("gemm_on", "on", "1"),
                                    again = run("gemm_on_again", "on", "1");
  ASSERT_EQ(off.size(), 6u);
  ASSERT_EQ(on.size(), 6u);
  ASSERT_EQ(again.size(), 6u);
  EXPECT_EQ(on[0]["loss"].get<double>(), off[0]["loss"].get<double>());
  EXPECT_NEAR(on[0]["grad_norm"].get<double>(), off[0]["grad_norm"].get<double>(), 1e-6 * off[0]["grad_norm"].get<double>());
  for (size_t i = 0; i < on.size(); ++i) {
    std::printf("step %zu: loss %.6f grad_norm %.9g (pass: %.6f %.9g)\n", i + 1, on[i]["loss"].get<double>(),
                on[i]["grad_norm"].get<double>(), off[i]["loss"].get<double>(), off[i]["grad_norm"].get<double>());
    EXPECT_EQ(again[i]["loss"].get<double>(), on[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(again[i]["grad_norm"].get<double>(), on[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_NEAR(on[i]["loss"].get<double>(), off[i]["loss"].get<double>(), 1e-3) << "step " << i + 1;
    EXPECT_GT(on[i]["grad_norm"].get<double>(), 0.01) << "step " << i + 1 << " not clipped";
  }
  expect_same_files(saved["gemm_on_again"], saved["gemm_on"]);
  EXPECT_TRUE(profiled("gemm_on", kExpertSumsPhase));
  EXPECT_FALSE(profiled("gemm_off", kExpertSumsPhase));
  run("gemm_on_accumulate_2", "on", "2");
  EXPECT_FALSE(profiled("gemm_on_accumulate_2", kExpertSumsPhase));
}

}  // namespace
}  // namespace moetune
