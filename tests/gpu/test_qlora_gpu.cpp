// LoRA with training.recompute, and QLoRA (lora.quantize: nf4), on the GPU engine. A recomputed sublayer runs its
// forward again before its backward, so its adapters' u = x·Aᵀ must come back with it: the gradients with
// recomputation equal those without. QLoRA holds the frozen base in NF4 (model/cuda/nf4_base.h) and dequantizes
// a layer's weights into a bf16 scratch before each pass over it: the scratch holds exactly the CPU's NF4 values
// rounded to bf16, training tracks the CPU engine's QLoRA, and on the embedded default QLoRA's losses track bf16
// LoRA's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/cuda/nf4_base.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/model/memory_plan.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/ops/cast.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

class LoraRecomputeGpu : public testing::GpuTest {};

model::LoraConfig lora_config(int64_t rank) {
  model::LoraConfig config;
  config.rank = rank;
  config.alpha = 2.0 * double(rank);
  config.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  config.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  config.seed = 5;
  return config;
}

// The fixture on the GPU in bf16 with LoRA attached; B random (PEFT starts it at zero, which would leave A's
// gradient and the adapters' part of d(x) at zero and test nothing).
model::ModelWeights lora_weights_on_gpu(const std::string& fixture, std::mt19937& rng) {
  model::ModelWeights weights = model::load_checkpoint(testing::fixture(fixture), {DType::BF16, Device::cuda()});
  const size_t base = weights.parameters.size();
  model::attach_lora(weights, lora_config(8));
  for (size_t i = base; i < weights.parameters.size(); ++i) {
    Tensor& adapter = weights.parameters[i];
    if (weights.layout.parameters[i].name.find(".lora_B.") != std::string::npos)
      adapter = testing::random_normal(adapter.shape(), DType::F32, Device::cpu(), rng, 0.05f);
    adapter = ops::cast(adapter, DType::BF16).to(Device::cuda());
  }
  return weights;
}

// The plan's stash for a mode (model/memory_plan.h, model/lora_memory_plan.h): every block's declaration, or the
// input alone where recomputed, and the adapters' u where not.
int64_t planned_stash(const model::cuda::CausalLM& model, model::Recompute mode, int64_t tokens) {
  const model::ModelSpec& spec = model.spec();
  int64_t planned = 0;
  for (const model::LayerSpec& layer : spec.layers)
    for (const model::SublayerSpec& sublayer : layer.sublayers)
      planned += model::recomputes(mode, sublayer) ? tokens * spec.hidden_size * 2
                                                   : model::gpu_stash_bytes(sublayer, spec.hidden_size, tokens);
  return planned + model::lora_gpu_stash_bytes(model.weights().layout, 8, tokens, mode);
}

TEST_F(LoraRecomputeGpu, SameGradientsInEveryMode) {
  SCOPED_TRACE(seed());
  auto model = model::cuda::CausalLM::from_weights(lora_weights_on_gpu("qwen3_moe_tiny", rng()));
  const model::ModelSpec& spec = model.spec();
  const int64_t rows = 2, seq = 24;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % spec.vocab_size);
  const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
  const model::Batch batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
  auto step = [&](model::Recompute mode, std::vector<Tensor>& grads, int64_t& stash) {
    model.set_recompute(mode);
    model.zero_grad();
    const double loss = model.forward_backward(batch).lm_loss;
    grads.clear();
    for (const Tensor& g : model.parameters().grads()) grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());
    stash = 0;
    for (const auto& [name, bytes] : model.stash_report()) stash += int64_t(bytes);
    return loss;
  };
  std::vector<Tensor> reference;
  int64_t reference_stash = 0;
  const double reference_loss = step(model::Recompute::None, reference, reference_stash);
  size_t adapters = 0;
  for (const Tensor& g : reference) adapters += g.defined();
  ASSERT_GT(adapters, 0u);
  for (const model::Recompute mode : {model::Recompute::Experts, model::Recompute::Attention, model::Recompute::Full}) {
    SCOPED_TRACE(model::recompute_name(mode));
    std::vector<Tensor> grads;
    int64_t stash = 0;
    const double loss = step(mode, grads, stash);
    EXPECT_EQ(loss, reference_loss) << "the same forward";
    double worst = 0;
    size_t identical = 0, compared = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      ++compared;
      identical += std::memcmp(grads[i].raw_data(), reference[i].raw_data(), grads[i].nbytes()) == 0;
      worst = std::max(worst, testing::relative_error_f32(grads[i], reference[i]));
    }
    std::printf("recompute %s: %zu of %zu LoRA gradients bit-identical, largest relative error %.2e; stash %ld vs %ld bytes\n",
                model::recompute_name(mode), identical, compared, worst, long(stash), long(reference_stash));
    EXPECT_LE(worst, 1e-2) << "bf16 gradients, summed in another order at most";
    EXPECT_LT(stash, reference_stash);
    EXPECT_EQ(stash, planned_stash(model, mode, rows * seq)) << "the plan's stash, adapters included";
  }
  EXPECT_EQ(reference_stash, planned_stash(model, model::Recompute::None, rows * seq));
}

class QloraGpu : public testing::GpuTest {};

// The GPU's NF4 base, dequantized layer by layer, against the CPU engine's: the CPU rounds each frozen weight
// through NF4 in fp32; the scratch must hold those values rounded to bf16, bit for bit.
TEST_F(QloraGpu, ScratchHoldsTheCpusNf4WeightsBitForBit) {
  const std::filesystem::path folder = testing::fixture("qwen3_moe_tiny");
  model::cuda::Nf4Base base;
  model::LoadOptions options{DType::BF16, Device::cuda()};
  options.held_elsewhere = &model::cuda::Nf4Base::holds;
  options.take = [&](size_t index, const Tensor& host) { base.take(index, host); };
  model::ModelWeights gpu = model::load_checkpoint(folder, options);
  model::attach_lora(gpu, lora_config(8));  // freezes the base, as a QLoRA run does
  base.place(gpu);
  ASSERT_GT(base.weights_held(), 0u);

  model::ModelWeights cpu = model::load_checkpoint(folder, {DType::F32, Device::cpu()});
  model::attach_lora(cpu, lora_config(8));
  const size_t nf4_bytes = model::round_frozen_weights_to_nf4(cpu);
  EXPECT_LE(base.nf4_bytes(), nf4_bytes + base.weights_held() * 272 * sizeof(float)) << "the GPU's NF4 is the CPU's size";
  std::printf("NF4 base: %zu weights, %zu bytes (+ %zu bytes of bf16 scratch)\n", base.weights_held(), base.nf4_bytes(),
              base.scratch_bytes());

  size_t checked = 0;
  for (int64_t layer = cpu.spec().num_layers() - 1; layer >= 0; --layer) {  // any order: each call refills the scratch
    base.dequantize_layer(layer);
    for (size_t i = 0; i < cpu.parameters.size(); ++i) {
      const model::ParameterSpec& spec = cpu.layout.parameters[i];
      if (!model::cuda::Nf4Base::holds(spec) || spec.name.rfind("layers." + std::to_string(layer) + ".", 0) != 0) continue;
      SCOPED_TRACE(spec.name);
      const Tensor expected = ops::cast(cpu.parameters[i], DType::BF16);
      const Tensor actual = gpu.parameters[i].to(Device::cpu());
      ASSERT_EQ(actual.nbytes(), expected.nbytes());
      EXPECT_EQ(std::memcmp(actual.raw_data(), expected.raw_data(), expected.nbytes()), 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, base.weights_held());
}

class QloraTrainingGpu : public testing::TrainerTest {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
    TrainerTest::SetUp();
  }
};

const std::vector<std::string> kQlora = {"lora.rank=8", "lora.alpha=16", "lora.target_modules=[q_proj, k_proj, v_proj, o_proj]",
                                         "lora.target_parameters=[mlp.experts.gate_up_proj, mlp.experts.down_proj]",
                                         "optimizer.lr=2e-3", "lora.quantize=nf4"};

std::vector<std::string> qlora_on(const std::string& device, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), kQlora.begin(), kQlora.end());
  extra.push_back("training.device=" + device);
  return extra;
}

double largest_gap(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  std::printf("%s: %zu steps, largest relative gap %.4f (first %.5f / %.5f, last %.5f / %.5f)\n", what, a.size(), worst,
              a.empty() ? 0.0 : a.front(), b.empty() ? 0.0 : b.front(), a.empty() ? 0.0 : a.back(), b.empty() ? 0.0 : b.back());
  return worst;
}

TEST_F(QloraTrainingGpu, TracksTheCpuEnginesQloraAndRecomputesExactly) {
  const train::TrainResult gpu = train::Trainer(recipe("gpu", qlora_on("cuda")), {}, false).run();
  train::Trainer(recipe("cpu", qlora_on("cpu")), {}, false).run();
  train::Trainer(recipe("gpu_full", qlora_on("cuda", {"training.recompute=full"})), {}, false).run();
  ASSERT_EQ(gpu.steps, 6);
  EXPECT_TRUE(std::filesystem::exists(gpu.final_model / "adapter_model.safetensors"));
  const std::vector<double> on_gpu = testing::losses(metrics("gpu"));
  EXPECT_LE(largest_gap(on_gpu, testing::losses(metrics("cpu")), "QLoRA GPU (bf16) vs CPU (fp32)"), 0.02);
  EXPECT_LE(largest_gap(testing::losses(metrics("gpu_full")), on_gpu, "QLoRA GPU recompute full vs none"), 1e-3);
}

std::vector<double> run_losses(const std::filesystem::path& run, double* peak) {
  std::vector<double> losses;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line);
    if (!record.contains("grad_norm")) continue;
    losses.push_back(record["loss"].get<double>());
    if (peak && record.contains("gpu_peak_bytes")) *peak = record["gpu_peak_bytes"].get<double>();
  }
  return losses;
}

// The check on a trained model: the embedded default, rank 8, all-linear and the experts, 200 steps.
TEST_F(QloraGpu, TracksBf16LoraOnTheEmbeddedDefault) {
  testing::ScratchDir dir;
  std::vector<std::vector<double>> curves;
  double peaks[2] = {0, 0};
  for (const std::string quantize : {"none", "nf4"}) {
    const std::filesystem::path run = dir / quantize;
    const testing::RunResult result = testing::run_moetune(
        "finetune --set training.max_steps=200 --set training.device=cuda --set logging.every=1 --set lora.rank=8"
        " --set lora.alpha=16 --set lora.target_modules=all-linear"
        " --set 'lora.target_parameters=[mlp.experts.gate_up_proj, mlp.experts.down_proj]'"
        " --set lora.quantize=" + quantize + " --set output.dir=" + run.string());
    ASSERT_EQ(result.status, 0) << result.output;
    curves.push_back(run_losses(run, &peaks[curves.size()]));
    ASSERT_EQ(curves.back().size(), 200u) << result.output;
  }
  double worst = 0, tail_lora = 0, tail_qlora = 0;
  size_t over = 0;
  for (size_t i = 0; i < 200; ++i) {
    const double gap = std::fabs(curves[1][i] - curves[0][i]) / std::fabs(curves[0][i]);
    worst = std::max(worst, gap);
    over += gap > 0.03;
    if (i % 40 == 0 || i == 199) std::printf("step %3zu: LoRA %.4f QLoRA %.4f\n", i + 1, curves[0][i], curves[1][i]);
    if (i >= 180) {
      tail_lora += curves[0][i] / 20;
      tail_qlora += curves[1][i] / 20;
    }
  }
  std::printf("QLoRA vs LoRA on the embedded default: largest step gap %.4f (%zu of 200 steps over 3%%), last 20 steps' mean "
              "%.4f vs %.4f (%.2f%%); GPU peak %.1f MB vs %.1f MB\n",
              worst, over, tail_qlora, tail_lora, 100 * (tail_qlora / tail_lora - 1), peaks[1] / 1e6, peaks[0] / 1e6);
  EXPECT_LE(std::fabs(tail_qlora / tail_lora - 1), 0.03);
  EXPECT_LE(over, 10u) << "a few steps of a noisy curve may spike";
}

}  // namespace
}  // namespace moetune
