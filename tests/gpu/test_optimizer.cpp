// The GPU optimizer step (fused multi-tensor AdamW in three precisions, with 8-bit state too) and the device-side gradient norm and
// clip coefficient, against train::AdamW and train::clip_grad_norm on the host in fp32/double.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <set>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/half.h"
#include "moetune/ops/adamw_math.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/adamw.h"
#include "moetune/ops/cuda/grad_norm.h"
#include "moetune/train/adamw.h"
#include "moetune/train/grad_clip.h"

namespace moetune {
namespace {

using ops::cuda::AdamWHyper;
using ops::cuda::AdamWSlot;
using ops::cuda::OptimizerPrecision;
using testing::kBf16Tolerance;
using testing::poisoned;
using testing::relative_error;
using testing::to_cpu_f32;

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kWeightDecay = 0.1;
// The schedule changes the learning rate every step.
const std::vector<double> kLearningRates = {1e-3, 3e-4, 2e-3, 5e-4};

Tensor uniform(const Shape& shape, std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> distribution(low, high);
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = distribution(rng);
  return t;
}

Tensor random_signs(const Shape& shape, std::mt19937& rng) {
  std::bernoulli_distribution negative(0.5);
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = negative(rng) ? -1.0f : 1.0f;
  return t;
}

// f32 values ±U[0.5, 1.5]: kept away from 0 so that a tensor of one element has a meaningful relative error.
Tensor signed_uniform(const Shape& shape, std::mt19937& rng) {
  Tensor t = uniform(shape, rng, 0.5f, 1.5f);
  const Tensor signs = random_signs(shape, rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= signs.data<float>()[i];
  return t;
}

// The host f32 values of several tensors, end to end.
Tensor concatenated(const std::vector<Tensor>& tensors) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  Tensor all = Tensor::empty({total}, DType::F32);
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const Tensor values = to_cpu_f32(t);
    std::copy(values.data<float>(), values.data<float>() + values.numel(), all.data<float>() + offset);
    offset += values.numel();
  }
  return all;
}

// Stochastic rounding errs by up to one ulp (at most 2^-7 of the value) per write, unbiased: over a large tensor
// the errors average out below kBf16Tolerance, but a tensor of a few elements can only be held to the worst case
// of the test's 4 steps (4 × 2^-7, a little more for the moments, whose older errors decay by beta).
constexpr double kStochasticFewElementsTolerance = 5e-2;
constexpr int64_t kManyElements = 1000;

// `values` rounded to bf16 and back: what a bf16 tensor holding them holds.
Tensor bf16_representable(const Tensor& values) { return ops::cast(ops::cast(values, DType::BF16), DType::F32); }

// A CUDA tensor with `host`'s values (cast to `dtype`). `misaligned` places it one element into a larger buffer,
// so that its address is not 16-byte aligned and the kernels must take their scalar path.
Tensor on_gpu(const Tensor& host, DType dtype, bool misaligned) {
  const Tensor typed = host.dtype() == dtype ? host : ops::cast(host, dtype);
  if (!misaligned) return typed.to(Device::cuda());
  Tensor buffer = Tensor::zeros({typed.numel() + 1}, dtype, Device::cuda());
  Tensor view = buffer.flat_slice(1, typed.shape());
  view.copy_from(typed);
  return view;
}

// The same optimizer state on the GPU (in `precision`) and on the host (train::AdamW in fp32), fed the same
// gradients each step.
class TwinOptimizers {
 public:
  TwinOptimizers(OptimizerPrecision precision, const std::vector<Shape>& shapes, const std::set<size_t>& misaligned,
                 std::mt19937& rng)
      : precision_(precision) {
    const bool fp32_master = precision == OptimizerPrecision::Fp32Master;
    const DType moment_dtype = fp32_master ? DType::F32 : DType::BF16;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const bool odd = misaligned.count(i) > 0;
      // The master starts from arbitrary f32 values; bf16 states start from what bf16 can hold.
      const Tensor drawn = signed_uniform(shapes[i], rng);
      const Tensor initial = fp32_master ? drawn : bf16_representable(drawn);
      AdamWSlot slot;
      if (fp32_master) {
        slot.master = on_gpu(initial, DType::F32, odd);
        // Written, never read, in this mode: poisoned so that an element the kernel skips shows as NaN.
        slot.param = odd ? on_gpu(poisoned(shapes[i], DType::BF16, Device::cpu()), DType::BF16, true)
                         : poisoned(shapes[i], DType::BF16, Device::cuda());
      } else {
        slot.param = on_gpu(initial, DType::BF16, odd);
      }
      const Tensor zero = Tensor::zeros(shapes[i], DType::F32);
      slot.exp_avg = on_gpu(zero, moment_dtype, odd);
      slot.exp_avg_sq = on_gpu(zero, moment_dtype, odd);
      slot.grad = on_gpu(zero, DType::BF16, odd);
      gpu_.push_back(slot);
      cpu_params_.push_back(initial.clone());
      cpu_grads_.push_back(Tensor::zeros(shapes[i], DType::F32));
      // A fixed sign per element keeps the moments away from 0, so their relative error stays meaningful.
      grad_signs_.push_back(random_signs(shapes[i], rng));
    }
    cpu_ = std::make_unique<train::AdamW>(cpu_params_, cpu_grads_,
                                          train::AdamWOptions{.lr = kLearningRates[0], .beta1 = kBeta1, .beta2 = kBeta2,
                                                              .eps = kEps, .weight_decay = kWeightDecay});
  }

  // Fresh bf16 gradients; the host sees them multiplied by `scale` in f32, as the kernel computes them.
  void set_gradients(std::mt19937& rng, float scale) {
    for (size_t i = 0; i < gpu_.size(); ++i) {
      Tensor g = uniform(cpu_grads_[i].shape(), rng, 0.5f, 1.5f);
      for (int64_t j = 0; j < g.numel(); ++j) g.data<float>()[j] *= grad_signs_[i].data<float>()[j];
      const Tensor bf16 = ops::cast(g, DType::BF16);
      gpu_[i].grad.copy_from(bf16);
      const Tensor rounded = ops::cast(bf16, DType::F32);
      for (int64_t j = 0; j < g.numel(); ++j) cpu_grads_[i].data<float>()[j] = rounded.data<float>()[j] * scale;
    }
  }

  void step(double lr, const Tensor& grad_scale, uint64_t seed) {
    cpu_->step(lr);
    ops::cuda::adamw_step(gpu_, hyper(lr, cpu_->steps_taken()), precision_, grad_scale, seed);
  }

  static AdamWHyper hyper(double lr, int64_t step) {
    return {.lr = lr, .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps, .weight_decay = kWeightDecay, .step = step};
  }

  // Every output against the host: params (and master), both moments.
  void expect_close(double param_tolerance, double moment_tolerance) const {
    for (size_t i = 0; i < gpu_.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "slot " << i << " " << gpu_[i].param.str());
      const AdamWSlot& slot = gpu_[i];
      EXPECT_LE(relative_error(slot.exp_avg, cpu_->first_moments()[i]), tolerance_for(slot.param, moment_tolerance));
      EXPECT_LE(relative_error(slot.exp_avg_sq, cpu_->second_moments()[i]),
                tolerance_for(slot.param, moment_tolerance));
      if (precision_ == OptimizerPrecision::Fp32Master) {
        EXPECT_LE(relative_error(slot.master, cpu_params_[i]), param_tolerance);
        // The compute copy is exactly the master rounded to nearest even.
        const Tensor master = slot.master.to(Device::cpu());
        EXPECT_TRUE(slot.param.to(Device::cpu()).same_bytes(ops::cast(master, DType::BF16)));
        EXPECT_LE(relative_error(slot.param, cpu_params_[i]), kBf16Tolerance);
      } else {
        EXPECT_LE(relative_error(slot.param, cpu_params_[i]), tolerance_for(slot.param, param_tolerance));
      }
    }
    if (precision_ == OptimizerPrecision::Bf16Stochastic) {
      // All tensors together: many elements, so the full bf16 tolerance applies.
      std::vector<Tensor> params, exp_avgs, exp_avg_sqs;
      for (const AdamWSlot& slot : gpu_) {
        params.push_back(slot.param);
        exp_avgs.push_back(slot.exp_avg);
        exp_avg_sqs.push_back(slot.exp_avg_sq);
      }
      EXPECT_LE(relative_error(concatenated(params), concatenated(cpu_params_)), param_tolerance);
      EXPECT_LE(relative_error(concatenated(exp_avgs), concatenated(cpu_->first_moments())), moment_tolerance);
      EXPECT_LE(relative_error(concatenated(exp_avg_sqs), concatenated(cpu_->second_moments())), moment_tolerance);
    }
  }

  double tolerance_for(const Tensor& param, double tolerance) const {
    const bool few_elements = param.numel() < kManyElements;
    return precision_ == OptimizerPrecision::Bf16Stochastic && few_elements
               ? std::max(tolerance, kStochasticFewElementsTolerance)
               : tolerance;
  }

  const std::vector<AdamWSlot>& gpu() const { return gpu_; }
  std::vector<Tensor>& cpu_grads() { return cpu_grads_; }
  train::AdamW& cpu() { return *cpu_; }

 private:
  OptimizerPrecision precision_;
  std::vector<AdamWSlot> gpu_;
  std::vector<Tensor> cpu_params_, cpu_grads_, grad_signs_;
  std::unique_ptr<train::AdamW> cpu_;
};

Tensor device_scalar(float value) { return Tensor::from_vector<float>({value}, {1}).to(Device::cuda()); }
float read_scalar(const Tensor& t) { return to_cpu_f32(t).data<float>()[0]; }

// Sizes around the chunk (8192) and vector (8) widths, empty ones, and one of a million elements.
const std::vector<Shape> kMixedShapes = {{1}, {7}, {0}, {1000003}, {8192}, {8193}, {3, 257}, {64, 129}, {2, 0}, {9}};
const std::set<size_t> kMisalignedSlots = {1, 5, 9};

// Enough tensors that one step takes several launches (a launch's table holds a few hundred).
std::vector<Shape> many_small_shapes(std::mt19937& rng, int count) {
  std::uniform_int_distribution<int64_t> size(1, 40);
  std::vector<Shape> shapes;
  for (int i = 0; i < count; ++i) shapes.push_back({size(rng)});
  return shapes;
}

class AdamWGpu : public testing::GpuTest {
 protected:
  void run_against_cpu(OptimizerPrecision precision, const std::vector<Shape>& shapes,
                       const std::set<size_t>& misaligned, bool scale_gradients, double param_tolerance,
                       double moment_tolerance) {
    TwinOptimizers twins(precision, shapes, misaligned, rng());
    const float scale = scale_gradients ? 0.37f : 1.0f;
    const Tensor grad_scale = scale_gradients ? device_scalar(scale) : Tensor();
    for (double lr : kLearningRates) {
      twins.set_gradients(rng(), scale);
      twins.step(lr, grad_scale, seed());
    }
    twins.expect_close(param_tolerance, moment_tolerance);
  }
};

// Same arithmetic as the host in fp32; only FMA contraction may differ in the last bit.
TEST_F(AdamWGpu, Fp32MasterMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  run_against_cpu(OptimizerPrecision::Fp32Master, kMixedShapes, kMisalignedSlots, true, 1e-6, 1e-6);
}

TEST_F(AdamWGpu, PureBf16MatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  run_against_cpu(OptimizerPrecision::PureBf16, kMixedShapes, kMisalignedSlots, true, kBf16Tolerance, kBf16Tolerance);
}

TEST_F(AdamWGpu, Bf16StochasticMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  run_against_cpu(OptimizerPrecision::Bf16Stochastic, kMixedShapes, kMisalignedSlots, true, kBf16Tolerance,
                  kBf16Tolerance);
}

TEST_F(AdamWGpu, ManySmallTensorsWithoutGradScaleMatchCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const std::vector<Shape> shapes = many_small_shapes(rng(), 1000);
  const std::set<size_t> misaligned = {0, 383, 384, 999};
  for (OptimizerPrecision precision :
       {OptimizerPrecision::Fp32Master, OptimizerPrecision::PureBf16, OptimizerPrecision::Bf16Stochastic}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const bool fp32 = precision == OptimizerPrecision::Fp32Master;
    run_against_cpu(precision, shapes, misaligned, false, fp32 ? 1e-6 : kBf16Tolerance, fp32 ? 1e-6 : kBf16Tolerance);
  }
}

// An update of 1e-4 per step is far below half an ulp of 1.0 in bf16 (2^-9): rounding to nearest loses every
// one of them, stochastic rounding keeps them on average.
TEST_F(AdamWGpu, StochasticRoundingIsUnbiased) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  constexpr int64_t kElements = 65536;
  constexpr int kSteps = 200;
  constexpr double kLr = 1e-4;
  // The host reference of one element: param 1, gradient 1 every step, no weight decay.
  Tensor host_param = Tensor::from_vector<float>({1.0f}, {1}), host_grad = Tensor::from_vector<float>({1.0f}, {1});
  const train::AdamWOptions options{.lr = kLr, .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps, .weight_decay = 0};
  train::AdamW host({host_param}, {host_grad}, options);
  for (int s = 0; s < kSteps; ++s) host.step(kLr);
  const double expected = host_param.data<float>()[0];
  const double drift = 1.0 - expected;
  ASSERT_GT(drift, 0.01);

  for (OptimizerPrecision precision : {OptimizerPrecision::Bf16Stochastic, OptimizerPrecision::PureBf16}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const Tensor ones = Tensor::from_vector<float>(std::vector<float>(kElements, 1.0f), {kElements});
    const AdamWSlot slot{.param = on_gpu(ones, DType::BF16, false),
                         .grad = on_gpu(ones, DType::BF16, false),
                         .exp_avg = Tensor::zeros({kElements}, DType::BF16, Device::cuda()),
                         .exp_avg_sq = Tensor::zeros({kElements}, DType::BF16, Device::cuda())};
    for (int s = 1; s <= kSteps; ++s)
      ops::cuda::adamw_step({slot}, {.lr = kLr, .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps, .weight_decay = 0,
                                     .step = s},
                            precision, Tensor(), seed());
    const Tensor param = to_cpu_f32(slot.param);
    double mean = 0;
    for (int64_t i = 0; i < kElements; ++i) mean += param.data<float>()[i];
    mean /= double(kElements);
    if (precision == OptimizerPrecision::Bf16Stochastic) {
      // Per element the rounding noise after 200 steps is ~9e-3; the mean of 65536 is good to ~4e-5.
      EXPECT_NEAR(mean, expected, 0.03 * drift);
    } else {
      EXPECT_EQ(mean, 1.0);  // every update lost: why stochastic rounding exists
    }
  }
}

TEST_F(AdamWGpu, StochasticRoundingIsReproducible) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const Shape shape = {100003};
  const Tensor param = bf16_representable(signed_uniform(shape, rng()));
  const Tensor grad = signed_uniform(shape, rng());
  const Tensor exp_avg = uniform(shape, rng(), -0.1f, 0.1f);
  const Tensor exp_avg_sq = uniform(shape, rng(), 0.001f, 0.01f);
  auto one_step = [&](uint64_t rounding_seed) {
    AdamWSlot slot{.param = on_gpu(param, DType::BF16, false),
                   .grad = on_gpu(grad, DType::BF16, false),
                   .exp_avg = on_gpu(exp_avg, DType::BF16, false),
                   .exp_avg_sq = on_gpu(exp_avg_sq, DType::BF16, false)};
    ops::cuda::adamw_step({slot}, TwinOptimizers::hyper(1e-3, 7), OptimizerPrecision::Bf16Stochastic, Tensor(),
                          rounding_seed);
    return std::vector<Tensor>{slot.param.to(Device::cpu()), slot.exp_avg.to(Device::cpu()),
                               slot.exp_avg_sq.to(Device::cpu())};
  };
  const std::vector<Tensor> first = one_step(seed()), again = one_step(seed()), other = one_step(seed() + 1ull);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].same_bytes(again[i])) << "output " << i;
    EXPECT_FALSE(first[i].same_bytes(other[i])) << "output " << i;
  }
}

// Clipping without a host round trip: the norm and the coefficient stay on the device and scale the gradients
// inside the step, as clip_grad_norm_ followed by AdamW does on the host.
TEST_F(AdamWGpu, ClippedStepMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  TwinOptimizers twins(OptimizerPrecision::Fp32Master, {{1000003}, {7}, {4096}}, {1}, rng());
  std::vector<Tensor> gpu_grads;
  for (const AdamWSlot& slot : twins.gpu()) gpu_grads.push_back(slot.grad);
  for (double lr : kLearningRates) {
    twins.set_gradients(rng(), 1.0f);
    const double max_norm = 0.3 * train::global_grad_norm(twins.cpu_grads());
    train::clip_grad_norm(twins.cpu_grads(), max_norm);
    twins.cpu().step(lr);

    const Tensor norm_squared = poisoned({1}, DType::F32, Device::cuda());
    const Tensor coefficient = poisoned({1}, DType::F32, Device::cuda());
    ops::cuda::grad_norm_squared(gpu_grads, norm_squared);
    ops::cuda::clip_coefficient(norm_squared, max_norm, coefficient);
    EXPECT_NEAR(read_scalar(coefficient), 0.3, 1e-5);
    ops::cuda::adamw_step(twins.gpu(), TwinOptimizers::hyper(lr, twins.cpu().steps_taken()),
                          OptimizerPrecision::Fp32Master, coefficient, seed());
  }
  // The coefficient carries the fp32 sum's rounding (~1e-7) into the moments; Adam's update hardly sees it.
  twins.expect_close(1e-6, 1e-5);
}

TEST_F(AdamWGpu, RejectsMismatchedState) {
  const Shape shape = {5};
  const AdamWSlot bf16_moments{.param = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                               .grad = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                               .exp_avg = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                               .exp_avg_sq = Tensor::zeros(shape, DType::BF16, Device::cuda())};
  const AdamWHyper hyper = TwinOptimizers::hyper(1e-3, 1);
  EXPECT_THROW(ops::cuda::adamw_step({bf16_moments}, hyper, OptimizerPrecision::Fp32Master, Tensor(), 0), Error);
  AdamWSlot with_master = bf16_moments;
  with_master.master = Tensor::zeros(shape, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::adamw_step({with_master}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0), Error);
  AdamWSlot short_grad = bf16_moments;
  short_grad.grad = Tensor::zeros({4}, DType::BF16, Device::cuda());
  EXPECT_THROW(ops::cuda::adamw_step({short_grad}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0), Error);
  AdamWSlot host_param = bf16_moments;
  host_param.param = Tensor::zeros(shape, DType::BF16);
  EXPECT_THROW(ops::cuda::adamw_step({host_param}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0), Error);
  EXPECT_THROW(ops::cuda::adamw_step({bf16_moments}, TwinOptimizers::hyper(1e-3, 0), OptimizerPrecision::PureBf16,
                                     Tensor(), 0),
               Error);
  EXPECT_THROW(ops::cuda::adamw_step({bf16_moments}, hyper, OptimizerPrecision::PureBf16,
                                     Tensor::zeros({2}, DType::F32, Device::cuda()), 0),
               Error);
  EXPECT_NO_THROW(ops::cuda::adamw_step({}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0));
}

// Needs no GPU, but lives with the GPU optimizer it configures.
TEST(AdamWGpuApi, ParsesPrecisionNames) {
  EXPECT_EQ(ops::cuda::parse_optimizer_precision("fp32_master"), OptimizerPrecision::Fp32Master);
  EXPECT_EQ(ops::cuda::parse_optimizer_precision("bf16_stochastic_rounding"), OptimizerPrecision::Bf16Stochastic);
  EXPECT_EQ(ops::cuda::parse_optimizer_precision("pure_bf16"), OptimizerPrecision::PureBf16);
  try {
    ops::cuda::parse_optimizer_precision("fp16");
    FAIL() << "fp16 parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
}

// 8-bit state (optimizer.state: int8): the moments depend on the gradients alone, so in every precision the GPU's
// codes and absmax values are the CPU reference's bit for bit (the kernel is compiled without FMA contraction and
// shares the per-element code, ops/adamw_math.h and ops/blockwise_quant_math.h); the fp32 master weights are too,
// and bf16 parameters are within bf16 rounding (stochastic rounding: its tolerance) of the CPU's fp32 ones.
class AdamWInt8Gpu : public testing::GpuTest {
 protected:
  void run_against_cpu(OptimizerPrecision precision, const std::vector<Shape>& shapes, const std::set<size_t>& misaligned,
                       bool scale_gradients) {
    const bool fp32_master = precision == OptimizerPrecision::Fp32Master;
    std::vector<AdamWSlot> gpu;
    std::vector<Tensor> cpu_params, cpu_grads, signs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const bool odd = misaligned.count(i) > 0;
      const Tensor drawn = signed_uniform(shapes[i], rng());
      const Tensor initial = fp32_master ? drawn : bf16_representable(drawn);
      const Shape blocks = {ops::adamw_state_blocks(shape_numel(shapes[i]))};
      AdamWSlot slot;
      slot.param = fp32_master ? poisoned(shapes[i], DType::BF16, Device::cuda()) : on_gpu(initial, DType::BF16, odd);
      if (fp32_master) slot.master = on_gpu(initial, DType::F32, odd);
      slot.grad = on_gpu(Tensor::zeros(shapes[i], DType::F32), DType::BF16, odd);
      slot.exp_avg = on_gpu(Tensor::zeros(shapes[i], DType::U8), DType::U8, odd);
      slot.exp_avg_sq = on_gpu(Tensor::zeros(shapes[i], DType::U8), DType::U8, odd);
      slot.exp_avg_absmax = on_gpu(Tensor::zeros(blocks, DType::F32), DType::F32, odd);
      slot.exp_avg_sq_absmax = on_gpu(Tensor::zeros(blocks, DType::F32), DType::F32, odd);
      gpu.push_back(slot);
      cpu_params.push_back(initial.clone());
      cpu_grads.push_back(Tensor::zeros(shapes[i], DType::F32));
      signs.push_back(random_signs(shapes[i], rng()));
    }
    train::AdamW cpu(cpu_params, cpu_grads,
                     {.lr = kLearningRates[0], .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps, .weight_decay = kWeightDecay,
                      .int8_state = true});
    const float scale = scale_gradients ? 0.37f : 1.0f;
    const Tensor grad_scale = scale_gradients ? device_scalar(scale) : Tensor();
    // Gradients over four decades, as the moments of a real model span them.
    std::uniform_real_distribution<float> exponent(-4.0f, 0.0f);
    for (double lr : kLearningRates) {
      for (size_t i = 0; i < gpu.size(); ++i) {
        Tensor g = Tensor::empty(cpu_grads[i].shape(), DType::F32);
        for (int64_t j = 0; j < g.numel(); ++j)
          g.data<float>()[j] = signs[i].data<float>()[j] * std::pow(10.0f, exponent(rng()));
        const Tensor bf16 = ops::cast(g, DType::BF16);
        gpu[i].grad.copy_from(bf16);
        const Tensor rounded = ops::cast(bf16, DType::F32);
        for (int64_t j = 0; j < g.numel(); ++j) cpu_grads[i].data<float>()[j] = rounded.data<float>()[j] * scale;
      }
      cpu.step(lr);
      ops::cuda::adamw_step(gpu, TwinOptimizers::hyper(lr, cpu.steps_taken()), precision, grad_scale, seed(), true);
    }
    for (size_t i = 0; i < gpu.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "slot " << i << " " << gpu[i].param.str());
      EXPECT_TRUE(gpu[i].exp_avg.to(Device::cpu()).same_bytes(cpu.first_moments()[i]));
      EXPECT_TRUE(gpu[i].exp_avg_sq.to(Device::cpu()).same_bytes(cpu.second_moments()[i]));
      EXPECT_TRUE(gpu[i].exp_avg_absmax.to(Device::cpu()).same_bytes(cpu.first_moment_absmax()[i]));
      EXPECT_TRUE(gpu[i].exp_avg_sq_absmax.to(Device::cpu()).same_bytes(cpu.second_moment_absmax()[i]));
      if (fp32_master) {
        const Tensor master = gpu[i].master.to(Device::cpu());
        EXPECT_TRUE(master.same_bytes(cpu_params[i]));
        EXPECT_TRUE(gpu[i].param.to(Device::cpu()).same_bytes(ops::cast(master, DType::BF16)));
      } else {
        const bool few = gpu[i].param.numel() < kManyElements;
        const double tolerance = precision == OptimizerPrecision::Bf16Stochastic && few ? kStochasticFewElementsTolerance
                                                                                       : kBf16Tolerance;
        EXPECT_LE(relative_error(gpu[i].param, cpu_params[i]), tolerance);
      }
    }
  }
};

TEST_F(AdamWInt8Gpu, MatchesCpuBitForBitInEveryPrecision) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (OptimizerPrecision precision :
       {OptimizerPrecision::Fp32Master, OptimizerPrecision::PureBf16, OptimizerPrecision::Bf16Stochastic}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    run_against_cpu(precision, kMixedShapes, kMisalignedSlots, true);
  }
}

TEST_F(AdamWInt8Gpu, ManySmallTensorsWithoutGradScaleMatchCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  run_against_cpu(OptimizerPrecision::Fp32Master, many_small_shapes(rng(), 1000), {0, 319, 320, 999}, false);
}

// The step's time over one 128M-element tensor with bf16 moments and with 8-bit moments (printed for
// docs/benchmarks.md; AdamW is bandwidth-bound: ~14 B per element with bf16 moments, ~8 B with 8-bit ones).
TEST_F(AdamWInt8Gpu, SpeedBesideBf16Moments) {
  const int64_t n = int64_t(1) << 27;
  const Shape shape = {n}, blocks = {ops::adamw_state_blocks(n)};
  const Tensor grad = on_gpu(testing::random_normal(shape, DType::F32, Device::cpu(), rng(), 1e-3f), DType::BF16, false);
  const auto time_steps = [&](std::vector<AdamWSlot>& slots, bool int8_state) {
    constexpr int kWarmup = 2, kSteps = 10;
    const auto step = [&](int k) {
      ops::cuda::adamw_step(slots, TwinOptimizers::hyper(1e-3, k), OptimizerPrecision::PureBf16, Tensor(), seed(),
                            int8_state);
    };
    for (int k = 1; k <= kWarmup; ++k) step(k);
    gpu::synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int k = kWarmup + 1; k <= kWarmup + kSteps; ++k) step(k);
    gpu::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kSteps;
  };
  std::vector<AdamWSlot> bf16 = {{.param = Tensor::zeros(shape, DType::BF16, Device::cuda()), .grad = grad,
                                  .exp_avg = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                                  .exp_avg_sq = Tensor::zeros(shape, DType::BF16, Device::cuda())}};
  const double bf16_ms = time_steps(bf16, false);
  bf16.clear();
  std::vector<AdamWSlot> int8 = {{.param = Tensor::zeros(shape, DType::BF16, Device::cuda()), .grad = grad,
                                  .exp_avg = Tensor::zeros(shape, DType::U8, Device::cuda()),
                                  .exp_avg_sq = Tensor::zeros(shape, DType::U8, Device::cuda()),
                                  .exp_avg_absmax = Tensor::zeros(blocks, DType::F32, Device::cuda()),
                                  .exp_avg_sq_absmax = Tensor::zeros(blocks, DType::F32, Device::cuda())}};
  const double int8_ms = time_steps(int8, true);
  std::printf("AdamW step over %lld elements (pure bf16 weights): bf16 moments %.3f ms (%.0f GB/s at 14 B), 8-bit "
              "moments %.3f ms (%.0f GB/s at 8 B)\n",
              static_cast<long long>(n), bf16_ms, 14.0 * double(n) / bf16_ms / 1e6, int8_ms,
              8.0 * double(n) / int8_ms / 1e6);
}

TEST_F(AdamWInt8Gpu, RejectsMismatchedState) {
  const Shape shape = {300};
  const AdamWSlot slot{.param = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                       .grad = Tensor::zeros(shape, DType::BF16, Device::cuda()),
                       .exp_avg = Tensor::zeros(shape, DType::U8, Device::cuda()),
                       .exp_avg_sq = Tensor::zeros(shape, DType::U8, Device::cuda()),
                       .exp_avg_absmax = Tensor::zeros({2}, DType::F32, Device::cuda()),
                       .exp_avg_sq_absmax = Tensor::zeros({2}, DType::F32, Device::cuda())};
  const AdamWHyper hyper = TwinOptimizers::hyper(1e-3, 1);
  EXPECT_NO_THROW(ops::cuda::adamw_step({slot}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0, true));
  EXPECT_THROW(ops::cuda::adamw_step({slot}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0, false), Error);
  AdamWSlot short_absmax = slot;
  short_absmax.exp_avg_sq_absmax = Tensor::zeros({1}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::adamw_step({short_absmax}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0, true), Error);
  AdamWSlot no_absmax = slot;
  no_absmax.exp_avg_absmax = Tensor();
  EXPECT_THROW(ops::cuda::adamw_step({no_absmax}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0, true), Error);
  AdamWSlot bf16_moments = slot;
  bf16_moments.exp_avg = Tensor::zeros(shape, DType::BF16, Device::cuda());
  EXPECT_THROW(ops::cuda::adamw_step({bf16_moments}, hyper, OptimizerPrecision::PureBf16, Tensor(), 0, true), Error);
}

class GradNormGpu : public testing::GpuTest {};

double host_sum_of_squares(const std::vector<Tensor>& grads) {
  double sum = 0;
  for (const Tensor& g : grads) {
    const Tensor values = to_cpu_f32(g);
    for (int64_t i = 0; i < values.numel(); ++i) sum += double(values.data<float>()[i]) * values.data<float>()[i];
  }
  return sum;
}

// Odd sizes, empty tensors, misaligned views, and more tensors than one launch's table holds.
std::vector<Tensor> mixed_gradients(std::mt19937& rng) {
  std::vector<Shape> shapes = kMixedShapes;
  for (const Shape& shape : many_small_shapes(rng, 1100)) shapes.push_back(shape);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < shapes.size(); ++i)
    grads.push_back(on_gpu(testing::random_normal(shapes[i], DType::F32, Device::cpu(), rng), DType::BF16,
                           kMisalignedSlots.count(i) > 0 || i % 97 == 0));
  return grads;
}

TEST_F(GradNormGpu, MatchesHostDoubleSum) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const std::vector<Tensor> grads = mixed_gradients(rng());
  const double expected = host_sum_of_squares(grads);
  const Tensor norm_squared = poisoned({1}, DType::F32, Device::cuda());
  ops::cuda::grad_norm_squared(grads, norm_squared);
  EXPECT_LE(relative_error(norm_squared, Tensor::from_vector<float>({float(expected)}, {1})), 1e-5);

  // Clipping (coefficient below 1) and not (exactly 1).
  const double norm = std::sqrt(expected);
  for (double max_norm : {0.25 * norm, 4.0 * norm}) {
    SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm);
    const Tensor coefficient = poisoned({1}, DType::F32, Device::cuda());
    ops::cuda::clip_coefficient(norm_squared, max_norm, coefficient);
    const float expected_coefficient = float(std::min(1.0, max_norm / (norm + 1e-6)));
    EXPECT_LE(relative_error(coefficient, Tensor::from_vector<float>({expected_coefficient}, {1})), 1e-5);
  }
}

TEST_F(GradNormGpu, IsDeterministic) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const std::vector<Tensor> grads = mixed_gradients(rng());
  const Tensor first = poisoned({1}, DType::F32, Device::cuda()), second = poisoned({1}, DType::F32, Device::cuda());
  ops::cuda::grad_norm_squared(grads, first);
  ops::cuda::grad_norm_squared(grads, second);
  EXPECT_TRUE(first.to(Device::cpu()).same_bytes(second.to(Device::cpu())));
}

TEST_F(GradNormGpu, EmptyListGivesZeroAndNoClipping) {
  const Tensor norm_squared = poisoned({1}, DType::F32, Device::cuda());
  const Tensor coefficient = poisoned({1}, DType::F32, Device::cuda());
  ops::cuda::grad_norm_squared({}, norm_squared);
  ops::cuda::clip_coefficient(norm_squared, 1.0, coefficient);
  EXPECT_EQ(read_scalar(norm_squared), 0.0f);
  EXPECT_EQ(read_scalar(coefficient), 1.0f);
  ops::cuda::grad_norm_squared({Tensor::zeros({0}, DType::BF16, Device::cuda())}, norm_squared);
  EXPECT_EQ(read_scalar(norm_squared), 0.0f);
}

TEST_F(GradNormGpu, RejectsBadTensors) {
  const Tensor norm_squared = Tensor::zeros({1}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::grad_norm_squared({Tensor::zeros({3}, DType::F32, Device::cuda())}, norm_squared), Error);
  EXPECT_THROW(ops::cuda::grad_norm_squared({Tensor::zeros({3}, DType::BF16)}, norm_squared), Error);
  EXPECT_THROW(ops::cuda::grad_norm_squared({}, Tensor::zeros({2}, DType::F32, Device::cuda())), Error);
  EXPECT_THROW(ops::cuda::clip_coefficient(norm_squared, 0.0, Tensor::zeros({1}, DType::F32, Device::cuda())), Error);
}

}  // namespace
}  // namespace moetune
