// The GPU engine (bf16) on every fp32 fixture, for a plain, a padded and a packed batch: logits of real tokens,
// the losses and every parameter's gradient, against two references:
//  - transformers' fp32 dumps (tests/reference/make_parity.py, torch 2.11, transformers 5.17). The GPU model
//    holds the fixture's fp32 weights rounded to bf16, so this compares a slightly different model, and the
//    bound is wider than bf16 arithmetic alone would need;
//  - the CPU fp32 reference on the same bf16-rounded weights: the same model, so only the GPU's bf16
//    activations and fp32 accumulation differ.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "gpu_test_util.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/piece_transform.h"
#include "moetune/ops/cast.h"
#include "parity_batch.h"
#include "test_util.h"

namespace moetune::model {
namespace {

struct Tolerances {
  double logits, loss, gradient;
};
// Measured on the H200 (2026-11-30): logits 0.7–1.8e-2 from transformers and 0.7–1.5e-2 from the CPU engine on
// the same bf16 weights, losses ≤ 4e-3, the worst gradient 2–9e-2, always a small reduction-heavy one (q/k
// norm weights, the router) where bf16 activations leave the most relative noise. One case sits higher:
// qwen3_moe_tied_f32's plain batch is 3.3e-2 off in its logits and 1.05e-2 in its aux loss against *both*
// references, with its other two batches at 0.7e-2. That is one top-k near-tie in a 24-token tiny model
// flipping under bf16 activations: a discrete change the bounds below must admit.
constexpr Tolerances kAgainstHf{5e-2, 2e-2, 1.5e-1};
constexpr Tolerances kAgainstCpuOnBf16Weights{5e-2, 2e-2, 1.5e-1};
// Gradients that are short sums of cancelling terms carry the most relative bf16 noise: k_proj.bias's (nearly zero
// by symmetry, tests/model/test_parity.cpp says why; 6–12e-2 here) and GPT-OSS's sinks' (ds_h = −Σ_t p_sink·D_t
// over a few tokens: gpt_oss_tiny's packed layer 1 sinks gradient is 4e-3 in norm, and transformers' own bf16 run
// is 0.13 off it, tests/reference/bf16_gradient_noise.py; the GPU 0.15–0.18).
constexpr double kCancellingGradientTolerance = 2e-1;
bool cancelling_gradient(const std::string& hf_name) {
  return hf_name.ends_with("k_proj.bias") || hf_name.ends_with("self_attn.sinks");
}

// The CPU reference model on the fixture's weights rounded to bf16 and widened back to fp32.
CausalLM cpu_on_bf16_weights(const std::filesystem::path& folder) {
  model::ModelWeights weights = model::load_checkpoint(folder, model::LoadOptions{DType::BF16});
  for (Tensor& p : weights.parameters) p = ops::cast(p, DType::F32);
  return CausalLM::from_weights(std::move(weights));
}

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

  Batch batch(const std::string& name) const { return testing::parity_batch(*reference_, name); }

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

  // Per reference: relative errors of logits, loss, lm_loss, aux_loss and the worst gradient, each checked.
  void compare(const std::string& label, const Tolerances& tolerance, const Tensor& logits, const CausalLMOutput& out,
               const Tensor& ref_logits, double ref_loss, double ref_lm_loss, double ref_aux_loss,
               const std::function<Tensor(const std::string& hf_name)>& ref_grad, cuda::CausalLM& model,
               const Batch& b) {
    const double logits_error = testing::relative_error(real_rows(logits, b), real_rows(ref_logits, b));
    EXPECT_LE(logits_error, tolerance.logits) << label << " logits";
    EXPECT_LE(relative(out.loss, ref_loss), tolerance.loss) << label << " loss";
    EXPECT_LE(relative(out.lm_loss, ref_lm_loss), tolerance.loss) << label << " lm_loss";
    if (model.spec().is_moe()) {
      EXPECT_LE(relative(out.aux_loss, ref_aux_loss), tolerance.loss) << label << " aux_loss";
    }
    const auto& specs = model.weights().layout.parameters;
    double worst = 0;
    std::string worst_name;
    auto check_grad = [&](const Tensor& actual, const std::string& hf_name) {
      const double error = testing::relative_error(actual, ref_grad(hf_name));
      if (error > worst) worst = error, worst_name = hf_name;
      EXPECT_LE(error, cancelling_gradient(hf_name) ? kCancellingGradientTolerance : tolerance.gradient)
          << label << " grad " << hf_name;
    };
    for (size_t i = 0; i < specs.size(); ++i) {
      const Tensor grad = testing::to_cpu_f32(model.parameters().grads()[i]);
      if (!specs[i].fused_hf_name.empty()) {
        check_grad(grad, specs[i].fused_hf_name);
        continue;
      }
      int64_t offset = 0;
      for (const auto& piece : specs[i].pieces) {
        // In the checkpoint's layout (GPT-OSS's experts are transposed and interleaved there).
        check_grad(piece_to_hf(grad.flat_slice(offset, engine_shape(piece)), piece, DType::F32), piece.name);
        offset += shape_numel(piece.shape);
      }
    }
    std::printf("%s %s: logits %.2e | loss %.2e | worst gradient %.2e (%s)\n", GetParam().c_str(), label.c_str(),
                logits_error, relative(out.loss, ref_loss), worst, worst_name.c_str());
  }

  void check_case(const std::string& name) {
    cuda::CausalLM model = cuda::CausalLM::from_pretrained(folder_);
    const Batch b = batch(name);
    const Tensor logits = model.logits(b);
    const CausalLMOutput out = model.forward_backward(b);

    compare(name + " transformers", kAgainstHf, logits, out, ref(name + ".logits"), ref(name + ".loss").data<float>()[0],
            ref(name + ".lm_loss").data<float>()[0],
            model.spec().is_moe() ? ref(name + ".aux_loss").data<float>()[0] : NAN,
            [&](const std::string& hf) { return ref(name + ".grad." + hf); }, model, b);

    CausalLM cpu = cpu_on_bf16_weights(folder_);
    const CausalLMOutput cpu_out = cpu.forward(b);
    cpu.backward();
    // The CPU engine's gradients by HF name, cut from its fused parameters the same way.
    std::map<std::string, Tensor> cpu_grads;
    const auto& specs = cpu.weights().layout.parameters;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Tensor& grad = cpu.parameters().grads()[i];
      if (!specs[i].fused_hf_name.empty()) {
        cpu_grads[specs[i].fused_hf_name] = grad;
        continue;
      }
      int64_t offset = 0;
      for (const auto& piece : specs[i].pieces) {
        cpu_grads[piece.name] = piece_to_hf(grad.flat_slice(offset, engine_shape(piece)), piece, DType::F32);
        offset += shape_numel(piece.shape);
      }
    }
    compare(name + " cpu-on-bf16-weights", kAgainstCpuOnBf16Weights, logits, out, cpu_out.logits, cpu_out.loss,
            cpu_out.lm_loss, cpu_out.aux_loss, [&](const std::string& hf) { return cpu_grads.at(hf); }, model, b);
  }

  std::filesystem::path folder_;
  std::unique_ptr<io::SafetensorsFile> reference_;
};

TEST_P(ModelParityGpu, PlainBatch) { check_case("plain"); }
TEST_P(ModelParityGpu, PaddedBatchWithAttentionMask) { check_case("padded"); }
TEST_P(ModelParityGpu, PackedRowWithRestartingPositions) { check_case("packed"); }

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParityGpu,
                         ::testing::Values("qwen3_moe_tiny", "qwen3_moe_tied_f32", "qwen3_f32", "llama_tiny", "mixtral_tiny",
                                           "qwen2_moe_tiny", "gpt_oss_tiny"));

}  // namespace
}  // namespace moetune::model
