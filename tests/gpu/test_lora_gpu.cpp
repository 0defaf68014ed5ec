// LoRA on the GPU: the low-rank products (ops/cuda/lora.h, dense through cuBLASLt and per expert through the
// grouped GEMMs) against the fp32 CPU reference (ops/lora.h) on the same bf16-rounded inputs, and LoRA dropout's
// masks bit for bit; then a LoRA fine-tune of the tiny MoE fixture on the GPU against the CPU engine (losses over
// a few steps, bf16 vs fp32; with dropout too, the engines sharing the masks), and a GPU-saved adapter resumed on
// both engines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_util.h"
#include "moetune/core/device.h"
#include "moetune/io/safetensors.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/lora.h"
#include "moetune/ops/cuda/lora_stacked.h"
#include "moetune/ops/lora.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

class LoraGpu : public testing::GpuTest {};

TEST_F(LoraGpu, DenseForwardAndBackwardMatchCpu) {
  SCOPED_TRACE(seed());
  const int64_t tokens = 37, in = 64, width = 96, rank = 16;
  const double scale = 2.0;
  // A whole-width adapter (o_proj) and one on a piece of a fused output (k_proj's columns of qkv).
  for (const auto& [first, cols] : {std::pair<int64_t, int64_t>{0, width}, {40, 24}}) {
    SCOPED_TRACE(::testing::Message() << "columns " << first << " + " << cols);
    const Tensor x = random_normal({tokens, in}, DType::BF16, Device::cuda(), rng());
    const Tensor a = random_normal({rank, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
    const Tensor b = random_normal({cols, rank}, DType::BF16, Device::cuda(), rng(), 0.1f);
    const Tensor y = random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
    const Tensor y_cpu = to_cpu_f32(y);
    const Tensor u = ops::cuda::lora_forward(x, a, b, scale, y, first);
    const Tensor u_cpu = ops::lora_forward(to_cpu_f32(x), to_cpu_f32(a), to_cpu_f32(b), scale, y_cpu, first);
    EXPECT_LE(relative_error(to_cpu_f32(y), y_cpu), kBf16Tolerance);
    EXPECT_LE(relative_error(to_cpu_f32(u), u_cpu), kBf16Tolerance);

    const Tensor dy = random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
    const Tensor da = random_normal({rank, in}, DType::BF16, Device::cuda(), rng());
    const Tensor db = random_normal({cols, rank}, DType::BF16, Device::cuda(), rng());
    const Tensor dx = random_normal({tokens, in}, DType::BF16, Device::cuda(), rng());
    const Tensor da_cpu = to_cpu_f32(da), db_cpu = to_cpu_f32(db), dx_cpu = to_cpu_f32(dx);
    ops::cuda::lora_backward(dy, first, x, u, a, b, scale, da, db, dx);
    ops::lora_backward(to_cpu_f32(dy), first, to_cpu_f32(x), u_cpu, to_cpu_f32(a), to_cpu_f32(b), scale, da_cpu, db_cpu, dx_cpu);
    EXPECT_LE(relative_error(to_cpu_f32(da), da_cpu), kBf16Tolerance);
    EXPECT_LE(relative_error(to_cpu_f32(db), db_cpu), kBf16Tolerance);
    EXPECT_LE(relative_error(to_cpu_f32(dx), dx_cpu), kBf16Tolerance);
  }
}

TEST_F(LoraGpu, GroupedLowRankGemmsMatchCpu) {
  SCOPED_TRACE(seed());
  const int64_t experts = 5, in = 64, out = 96, rank = 16;
  const double scale = 0.5;
  const std::vector<int64_t> offsets = {0, 13, 13, 40, 41, 70};  // expert 1 has no rows
  const int64_t rows = offsets.back();
  std::vector<int32_t> offsets32(offsets.begin(), offsets.end());
  const Tensor device_offsets = Tensor::from_vector(offsets32, {experts + 1}).to(Device::cuda());
  const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
  const Tensor a = random_normal({experts * rank, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
  const Tensor b = random_normal({out, rank * experts}, DType::BF16, Device::cuda(), rng(), 0.1f);
  const Tensor y = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
  const Tensor y_cpu = to_cpu_f32(y);
  const Tensor u = ops::cuda::lora_grouped_forward(x, device_offsets, a, b, scale, y);
  const Tensor u_cpu = ops::lora_grouped_forward(to_cpu_f32(x), offsets, to_cpu_f32(a), to_cpu_f32(b), scale, y_cpu);
  EXPECT_LE(relative_error(to_cpu_f32(y), y_cpu), kBf16Tolerance);
  EXPECT_LE(relative_error(to_cpu_f32(u), u_cpu), kBf16Tolerance);

  const Tensor dy = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
  const Tensor da = random_normal({experts * rank, in}, DType::BF16, Device::cuda(), rng());
  const Tensor db = random_normal({out, rank * experts}, DType::BF16, Device::cuda(), rng());
  const Tensor dx = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
  const Tensor da_cpu = to_cpu_f32(da), db_cpu = to_cpu_f32(db), dx_cpu = to_cpu_f32(dx);
  ops::cuda::lora_grouped_backward(dy, x, u, device_offsets, a, b, scale, da, db, dx);
  ops::lora_grouped_backward(to_cpu_f32(dy), to_cpu_f32(x), u_cpu, offsets, to_cpu_f32(a), to_cpu_f32(b), scale, da_cpu,
                             db_cpu, dx_cpu);
  EXPECT_LE(relative_error(to_cpu_f32(da), da_cpu), kBf16Tolerance);
  EXPECT_LE(relative_error(to_cpu_f32(db), db_cpu), kBf16Tolerance);
  EXPECT_LE(relative_error(to_cpu_f32(dx), dx_cpu), kBf16Tolerance);
}

// q, k and v's adapters as one stacked product (ops/cuda/lora_stacked.h) against the CPU's adapter-by-adapter
// reference; v's columns before k's and a gap with no adapter (an unadapted piece) included.
TEST_F(LoraGpu, StackedAdaptersMatchCpu) {
  SCOPED_TRACE(seed());
  const int64_t tokens = 37, in = 64, width = 112, rank = 16;
  const double scale = 2.0;
  const std::vector<std::pair<int64_t, int64_t>> places = {{0, 48}, {88, 24}, {56, 24}};  // columns 48..55 unadapted
  std::vector<ops::cuda::StackedPiece> pieces;
  for (const auto& [first, cols] : places)
    pieces.push_back({random_normal({rank, in}, DType::BF16, Device::cuda(), rng(), 0.1f),
                      random_normal({cols, rank}, DType::BF16, Device::cuda(), rng(), 0.1f), first});
  const Tensor x = random_normal({tokens, in}, DType::BF16, Device::cuda(), rng());
  const Tensor y = random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
  const Tensor y_cpu = to_cpu_f32(y);
  const Tensor a_stack = ops::cuda::stack_a(pieces), b_diagonal = ops::cuda::block_diagonal_b(pieces, width);
  const Tensor u = ops::cuda::lora_stacked_forward(x, a_stack, b_diagonal, scale, y);
  std::vector<Tensor> u_cpu;
  for (const ops::cuda::StackedPiece& p : pieces)
    u_cpu.push_back(ops::lora_forward(to_cpu_f32(x), to_cpu_f32(p.a), to_cpu_f32(p.b), scale, y_cpu, p.first_column));
  EXPECT_LE(relative_error(to_cpu_f32(y), y_cpu), kBf16Tolerance);

  const Tensor dy = random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
  const Tensor dx = random_normal({tokens, in}, DType::BF16, Device::cuda(), rng());
  const Tensor dx_cpu = to_cpu_f32(dx);
  std::vector<Tensor> a_grads, b_grads, a_grads_cpu, b_grads_cpu;
  for (const ops::cuda::StackedPiece& p : pieces) {
    a_grads.push_back(random_normal(p.a.shape(), DType::BF16, Device::cuda(), rng()));
    b_grads.push_back(random_normal(p.b.shape(), DType::BF16, Device::cuda(), rng()));
    a_grads_cpu.push_back(to_cpu_f32(a_grads.back()));
    b_grads_cpu.push_back(to_cpu_f32(b_grads.back()));
  }
  ops::cuda::lora_stacked_backward(dy, x, u, pieces, a_stack, b_diagonal, scale, a_grads, b_grads, dx);
  for (size_t j = 0; j < pieces.size(); ++j)
    ops::lora_backward(to_cpu_f32(dy), pieces[j].first_column, to_cpu_f32(x), u_cpu[j], to_cpu_f32(pieces[j].a),
                       to_cpu_f32(pieces[j].b), scale, a_grads_cpu[j], b_grads_cpu[j], dx_cpu);
  EXPECT_LE(relative_error(to_cpu_f32(dx), dx_cpu), kBf16Tolerance);
  for (size_t j = 0; j < pieces.size(); ++j) {
    SCOPED_TRACE(::testing::Message() << "adapter " << j);
    EXPECT_LE(relative_error(to_cpu_f32(a_grads[j]), a_grads_cpu[j]), kBf16Tolerance);
    EXPECT_LE(relative_error(to_cpu_f32(b_grads[j]), b_grads_cpu[j]), kBf16Tolerance);
  }
}

// The GPU applies the CPU's mask: the same kept elements, the same float32 products, rounded to bf16 once.
TEST_F(LoraGpu, DropoutMatchesCpuBitForBit) {
  SCOPED_TRACE(seed());
  const ops::LoraDropout dropout = ops::lora_dropout(0.3, seed(), ops::lora_module_id("layers.1.attn.o.lora_A.0"), 5);
  const Tensor x = random_normal({301, 96}, DType::BF16, Device::cuda(), rng());
  const Tensor dropped = ops::cuda::lora_dropout_apply(x, dropout);
  const Tensor expected = ops::cast(ops::lora_dropout_apply(to_cpu_f32(x), dropout), DType::BF16);
  const Tensor dropped_host = dropped.to(Device::cpu());
  EXPECT_EQ(std::memcmp(dropped_host.raw_data(), expected.raw_data(), expected.nbytes()), 0);
  int64_t zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) zeros += !dropout.keeps(uint64_t(i));
  EXPECT_NEAR(double(zeros) / double(x.numel()), 0.3, 0.03);

  const Tensor dst = random_normal({301, 96}, DType::BF16, Device::cuda(), rng());
  const Tensor expected_sum = to_cpu_f32(dst);
  ops::lora_dropout_add(to_cpu_f32(x), dropout, expected_sum);
  ops::cuda::lora_dropout_add(x, dropout, dst);
  const Tensor sum_host = dst.to(Device::cpu()), expected_sum_bf16 = ops::cast(expected_sum, DType::BF16);
  EXPECT_EQ(std::memcmp(sum_host.raw_data(), expected_sum_bf16.raw_data(), expected_sum_bf16.nbytes()), 0);
}

TEST_F(LoraGpu, ExpertBRearrangesToGroupedLayout) {
  const int64_t experts = 3, out = 8, rank = 8;
  const Tensor packed = random_normal({out, rank * experts}, DType::BF16, Device::cuda(), rng());
  const Tensor grouped = to_cpu_f32(ops::cuda::expert_b_grouped(packed, experts));
  for (int64_t e = 0; e < experts; ++e)
    EXPECT_EQ(relative_error(grouped[e].clone(), ops::expert_lora_b(to_cpu_f32(packed), e, experts)), 0.0) << "expert " << e;
}

// LoRA and training.freeze trained by the GPU engine against the CPU engine (first run on the H200 2026-12-01).
class LoraTrainingGpu : public testing::GpuTrainerTest {};

const std::vector<std::string> kLora = {"lora.rank=8", "lora.alpha=16", "lora.target_modules=[q_proj, k_proj, v_proj, o_proj]",
                                        "lora.target_parameters=[mlp.experts.gate_up_proj, mlp.experts.down_proj]",
                                        "optimizer.lr=2e-3"};

std::vector<std::string> on(const std::string& device, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), kLora.begin(), kLora.end());
  extra.push_back("training.device=" + device);
  return extra;
}

void expect_close(const std::vector<double>& gpu, const std::vector<double>& cpu, double tolerance) {
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double gap = std::fabs(gpu[i] - cpu[i]) / std::fabs(cpu[i]);
    worst = std::max(worst, gap);
    std::printf("step %zu: cpu %.5f gpu %.5f\n", i + 1, cpu[i], gpu[i]);
  }
  std::printf("largest relative gap: %.4f\n", worst);
  EXPECT_LE(worst, tolerance);
}

TEST_F(LoraTrainingGpu, LossesTrackTheCpuEngineAndTheAdapterResumes) {
  const train::TrainResult gpu = train::Trainer(recipe("gpu", on("cuda")), {}, false).run();
  const train::TrainResult cpu = train::Trainer(recipe("cpu", on("cpu")), {}, false).run();
  ASSERT_EQ(gpu.steps, 6);
  const std::vector<double> gpu_losses = testing::losses(metrics("gpu")), cpu_losses = testing::losses(metrics("cpu"));
  expect_close(gpu_losses, cpu_losses, 0.02);
  ASSERT_TRUE(std::filesystem::exists(gpu.final_model / "adapter_model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(gpu.final_model / "model.safetensors"));
  // Trained on the GPU: B starts at zero, and moved.
  const io::SafetensorsFile saved = io::SafetensorsFile::open(gpu.final_model / "adapter_model.safetensors");
  double b_norm = 0;
  for (const io::SafetensorsEntry& entry : saved.entries())
    if (entry.name.find("lora_B") != std::string::npos) {
      const Tensor b = to_cpu_f32(saved.tensor(entry.name));
      for (int64_t i = 0; i < b.numel(); ++i) b_norm += std::fabs(b.data<float>()[i]);
    }
  EXPECT_GT(b_norm, 0.0);

  // The GPU's adapter, resumed on both engines: the same starting loss.
  const std::string adapter = "lora.adapter=" + gpu.final_model.string();
  train::Trainer(recipe("gpu_resumed", {adapter, "training.max_steps=2", "training.device=cuda"}), {}, false).run();
  train::Trainer(recipe("cpu_resumed", {adapter, "training.max_steps=2", "training.device=cpu"}), {}, false).run();
  const std::vector<double> gpu_resumed = testing::losses(metrics("gpu_resumed")), cpu_resumed = testing::losses(metrics("cpu_resumed"));
  ASSERT_EQ(gpu_resumed.size(), 2u);
  expect_close(gpu_resumed, cpu_resumed, 0.02);
}

// GPT-OSS's experts (biases, clamped SwiGLU; PEFT's target_parameters, gate / up interleaved in the saved B) and
// its attention: the GPU tracks the CPU, and the GPU's adapter resumes on both engines at the same loss.
TEST_F(LoraTrainingGpu, GptOssExpertsTrackTheCpuAndTheAdapterResumes) {
  const std::string model = "model=" + testing::fixture("gpt_oss_tiny").string();
  const train::TrainResult gpu = train::Trainer(recipe("gpu", on("cuda", {model})), {}, false).run();
  train::Trainer(recipe("cpu", on("cpu", {model})), {}, false).run();
  expect_close(testing::losses(metrics("gpu")), testing::losses(metrics("cpu")), 0.02);
  const std::string adapter = "lora.adapter=" + gpu.final_model.string();
  train::Trainer(recipe("gpu_resumed", {model, adapter, "training.max_steps=2", "training.device=cuda"}), {}, false)
      .run();
  train::Trainer(recipe("cpu_resumed", {model, adapter, "training.max_steps=2", "training.device=cpu"}), {}, false)
      .run();
  const std::vector<double> gpu_resumed = testing::losses(metrics("gpu_resumed"));
  ASSERT_EQ(gpu_resumed.size(), 2u);
  expect_close(gpu_resumed, testing::losses(metrics("cpu_resumed")), 0.02);
  EXPECT_GT(std::fabs(gpu_resumed[0] - testing::losses(metrics("gpu"))[0]), 1e-3) << "the resumed adapter acts";
}

// all-linear on Qwen2-MoE takes the shared expert's sigmoid gate (shared_expert_gate, an nn.Linear) with the
// attention and the shared expert; on Qwen3-Next also the Gated DeltaNet's in_proj pieces and out_proj and the gated
// attention's q_proj (query and gate rows): their adapters train on the GPU as on the CPU.
TEST_F(LoraTrainingGpu, AllLinearOnGatedFamiliesTracksTheCpu) {
  for (const char* name : {"qwen2_moe_tiny", "qwen3_next_tiny"}) {
    SCOPED_TRACE(name);
    const auto all_linear = [&](const std::string& device) {
      return std::vector<std::string>{
          "model=" + testing::fixture(name).string(), "lora.rank=8",       "lora.alpha=16",
          "lora.target_modules=all-linear",           "optimizer.lr=2e-3", "training.device=" + device};
    };
    const std::string gpu = std::string("gpu_") + name, cpu = std::string("cpu_") + name;
    train::Trainer(recipe(gpu, all_linear("cuda")), {}, false).run();
    train::Trainer(recipe(cpu, all_linear("cpu")), {}, false).run();
    expect_close(testing::losses(metrics(gpu)), testing::losses(metrics(cpu)), 0.02);
  }
}

// The training state of a GPU LoRA run holds the adapters and their moments (no slot for the frozen base): a
// run stopped after 3 steps and resumed ends where the uninterrupted one does.
TEST_F(LoraTrainingGpu, ResumesFromItsTrainingState) {
  train::Trainer(recipe("whole", on("cuda")), {}, false).run();
  {
    train::Trainer first_half(recipe("split", on("cuda")), {}, false);
    first_half.stop_after(3);
    EXPECT_TRUE(first_half.run().interrupted);
  }
  EXPECT_EQ(train::Trainer(recipe("split", on("cuda")), {}, /*resume=*/true).run().steps, 6);
  expect_close(testing::losses(metrics("split")), testing::losses(metrics("whole")), 1e-3);
}

// LoRA dropout on the GPU (attention adapters: PEFT and moetune refuse it on the experts' target_parameters): the
// GPU draws the CPU engine's masks, so the losses track as without dropout; with the experts recomputed they are
// the same again (the recompute test checks the gradients).
TEST_F(LoraTrainingGpu, DropoutTracksTheCpuEngine) {
  const std::vector<std::string> dropout = {"lora.rank=8", "lora.alpha=16", "lora.dropout=0.3",
                                            "lora.target_modules=[q_proj, k_proj, v_proj, o_proj]", "optimizer.lr=2e-3"};
  const auto with = [&](const std::string& device, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), dropout.begin(), dropout.end());
    extra.push_back("training.device=" + device);
    return extra;
  };
  train::Trainer(recipe("gpu", with("cuda")), {}, false).run();
  train::Trainer(recipe("cpu", with("cpu")), {}, false).run();
  train::Trainer(recipe("gpu_full", with("cuda", {"training.recompute=full"})), {}, false).run();
  train::Trainer(recipe("gpu_none", with("cuda", {"lora.dropout=0"})), {}, false).run();
  const std::vector<double> gpu = testing::losses(metrics("gpu"));
  expect_close(gpu, testing::losses(metrics("cpu")), 0.02);
  expect_close(testing::losses(metrics("gpu_full")), gpu, 1e-3);
  EXPECT_NE(testing::losses(metrics("gpu_none")), gpu) << "the masks act";
}

TEST_F(LoraTrainingGpu, FrozenParametersTrainOnTheGpu) {
  const std::vector<std::string> freeze = {"training.freeze=[embed_tokens, layers.*.moe.router]"};
  std::vector<std::string> gpu_set = freeze, cpu_set = freeze;
  gpu_set.push_back("training.device=cuda");
  cpu_set.push_back("training.device=cpu");
  train::Trainer(recipe("gpu", gpu_set), {}, false).run();
  train::Trainer(recipe("cpu", cpu_set), {}, false).run();
  // Full fine-tuning of the rest at lr 1e-2: bf16 drifts from fp32 faster than the LoRA runs above.
  expect_close(testing::losses(metrics("gpu")), testing::losses(metrics("cpu")), 0.05);
}

}  // namespace
}  // namespace moetune
