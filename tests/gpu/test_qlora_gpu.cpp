// QLoRA (lora.quantize: nf4) on the GPU engine: the frozen base is held in NF4 (model/cuda/nf4_base.h) and a
// layer's weights are dequantized into a bf16 scratch before each pass over it. The scratch holds exactly the
// CPU's NF4 values rounded to bf16, training tracks the CPU engine's QLoRA (and recomputes exactly), and on the
// embedded default QLoRA's losses track bf16 LoRA's. (LoRA with training.recompute: test_recompute_gpu.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/model/cuda/nf4_base.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/nf4_weights.h"
#include "moetune/ops/cast.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

class QloraGpu : public testing::GpuTest {};

// A QLoRA model's adapters (rank 8 on the attention projections and the experts): attaching them freezes the base.
model::LoraConfig rank8() {
  model::LoraConfig config;
  config.rank = 8;
  config.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  config.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return config;
}

// The GPU's NF4 base, dequantized layer by layer, against the CPU engine's: the CPU rounds each frozen weight
// through NF4 in fp32; the scratch must hold those values rounded to bf16, bit for bit.
TEST_F(QloraGpu, ScratchHoldsTheCpusNf4WeightsBitForBit) {
  const std::filesystem::path folder = testing::fixture("qwen3_moe_tiny");
  model::cuda::Nf4Base base;
  model::LoadOptions options{DType::BF16, Device::cuda()};
  options.held_elsewhere = &model::cuda::Nf4Base::holds;
  options.take = [&](size_t index, const Tensor& host) { base.take(index, host); };
  model::ModelWeights gpu = model::load_checkpoint(folder, options);
  model::attach_lora(gpu, rank8());  // freezes the base, as a QLoRA run does
  base.place(gpu);
  ASSERT_GT(base.weights_held(), 0u);

  model::ModelWeights cpu = model::load_checkpoint(folder, {DType::F32, Device::cpu()});
  model::attach_lora(cpu, rank8());
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

class QloraTrainingGpu : public testing::GpuTrainerTest {};

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
