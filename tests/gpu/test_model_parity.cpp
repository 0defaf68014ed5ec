// The GPU engine (bf16) against transformers' fp32 parity dumps (tests/reference/make_parity.py, torch 2.11,
// transformers 5.17) on every fp32 fixture: logits of real tokens, the losses and every parameter's gradient,
// for a plain, a padded and a packed batch. bf16 storage puts the error between 1e-3 and 1e-2 (DESIGN.md §4);
// gradients pass through more bf16 roundings than the logits and get a wider bound.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/cuda/causal_lm.h"
#include "test_util.h"

namespace moetune::model {
namespace {

constexpr double kLogitsTolerance = 1e-2;
constexpr double kLossTolerance = 1e-2;
constexpr double kGradientTolerance = 3e-2;

double relative(double actual, double expected) {
  return std::isnan(actual) ? INFINITY : std::fabs(actual - expected) / std::fabs(expected);
}

class ModelParityGpu : public testing::GpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    folder_ = testing::fixture(GetParam());
    reference_ = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(folder_ / "parity.safetensors"));
  }
  Tensor ref(const std::string& name) const { return reference_->tensor(name); }
  bool has(const std::string& name) const { return reference_->contains(name); }

  Batch batch(const std::string& name) const {
    Batch b;
    b.input_ids = ref(name + ".input_ids");
    b.labels = ref(name + ".labels");
    if (has(name + ".attention_mask")) b.attention_mask = ref(name + ".attention_mask");
    if (has(name + ".position_ids")) b.position_ids = ref(name + ".position_ids");
    b.output_router_logits = true;
    return b;
  }

  // The rows of real tokens of a [B, S, V] logits tensor, as [n, V] f32.
  static Tensor real_rows(const Tensor& logits, const Batch& b) {
    const int64_t vocab = logits.size(-1), tokens = b.input_ids.numel();
    std::vector<float> rows;
    const float* all = logits.data<float>();
    for (int64_t t = 0; t < tokens; ++t) {
      if (b.attention_mask.defined() && !b.attention_mask.data<int64_t>()[t]) continue;
      rows.insert(rows.end(), all + t * vocab, all + (t + 1) * vocab);
    }
    return Tensor::from_vector(rows, {int64_t(rows.size()) / vocab, vocab});
  }

  void check_case(const std::string& name) {
    cuda::CausalLM model = cuda::CausalLM::from_pretrained(folder_);
    const Batch b = batch(name);
    const Tensor logits = model.logits(b);
    const double logits_error = testing::relative_error(real_rows(logits, b), real_rows(ref(name + ".logits"), b));
    std::printf("%s %s: logits %.2e", GetParam().c_str(), name.c_str(), logits_error);
    EXPECT_LE(logits_error, kLogitsTolerance) << name << " logits";

    const CausalLMOutput out = model.forward_backward(b);
    std::printf(" | loss %.2e", relative(out.loss, ref(name + ".loss").data<float>()[0]));
    EXPECT_LE(relative(out.loss, ref(name + ".loss").data<float>()[0]), kLossTolerance) << name;
    EXPECT_LE(relative(out.lm_loss, ref(name + ".lm_loss").data<float>()[0]), kLossTolerance) << name;
    if (model.config().is_moe()) {
      EXPECT_LE(relative(out.aux_loss, ref(name + ".aux_loss").data<float>()[0]), kLossTolerance) << name;
    }

    const auto& specs = model.weights().layout.parameters;
    double worst = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Tensor grad = testing::to_cpu_f32(model.parameters().grads()[i]);
      if (!specs[i].fused_hf_name.empty()) {
        const double error = testing::relative_error(grad, ref(name + ".grad." + specs[i].fused_hf_name));
        worst = std::max(worst, error);
        EXPECT_LE(error, kGradientTolerance) << name << " grad " << specs[i].fused_hf_name;
        continue;
      }
      int64_t offset = 0;
      for (const auto& piece : specs[i].pieces) {
        const Tensor expected = ref(name + ".grad." + piece.name);
        const double error = testing::relative_error(grad.flat_slice(offset, expected.shape()), expected);
        worst = std::max(worst, error);
        EXPECT_LE(error, kGradientTolerance) << name << " grad " << piece.name;
        offset += expected.numel();
      }
    }
    std::printf(" | worst gradient %.2e\n", worst);
  }

  std::filesystem::path folder_;
  std::unique_ptr<io::SafetensorsFile> reference_;
};

TEST_P(ModelParityGpu, PlainBatch) { check_case("plain"); }
TEST_P(ModelParityGpu, PaddedBatchWithAttentionMask) { check_case("padded"); }
TEST_P(ModelParityGpu, PackedRowWithRestartingPositions) { check_case("packed"); }

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParityGpu,
                         ::testing::Values("qwen3_moe_tiny", "qwen3_moe_tied_f32", "qwen3_f32", "llama_tiny"));

}  // namespace
}  // namespace moetune::model
