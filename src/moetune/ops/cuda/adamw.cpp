#include "moetune/ops/cuda/adamw.h"

#include <cmath>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/adamw_kernels.h"

namespace moetune::ops::cuda {
namespace {

void check_state(const Tensor& tensor, const char* role, size_t slot, DType dtype, const Shape& shape) {
  MOETUNE_CHECK(tensor.defined(), "adamw_step: slot {}: {} is undefined", slot, role);
  MOETUNE_CHECK(tensor.device().is_cuda() && tensor.dtype() == dtype && tensor.shape() == shape,
                "adamw_step: slot {}: {} is {}, expected {}{} on cuda", slot, role, tensor.str(), dtype_name(dtype),
                shape_str(shape));
}

void check_hyper(const AdamWHyper& hyper) {
  MOETUNE_CHECK(hyper.step >= 1, "adamw_step: step {} (1-based, counted after the increment)", hyper.step);
  MOETUNE_CHECK(std::isfinite(hyper.lr) && hyper.lr >= 0, "adamw_step: learning rate {}", hyper.lr);
  MOETUNE_CHECK(hyper.beta1 >= 0 && hyper.beta1 < 1 && hyper.beta2 >= 0 && hyper.beta2 < 1,
                "adamw_step: betas ({}, {}) must lie in [0, 1)", hyper.beta1, hyper.beta2);
  MOETUNE_CHECK(hyper.eps > 0 && std::isfinite(hyper.eps), "adamw_step: eps {}", hyper.eps);
  MOETUNE_CHECK(std::isfinite(hyper.weight_decay) && hyper.weight_decay >= 0, "adamw_step: weight decay {}",
                hyper.weight_decay);
}

// Exactly train::AdamW's constants: double, then rounded to float once.
AdamWScalars scalars_of(const AdamWHyper& hyper, uint64_t seed) {
  const float beta1 = float(hyper.beta1), beta2 = float(hyper.beta2);
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, double(hyper.step));
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, double(hyper.step));
  return {.beta1 = beta1,
          .beta2 = beta2,
          .one_minus_beta1 = 1.0f - beta1,
          .one_minus_beta2 = 1.0f - beta2,
          .step_size = float(hyper.lr / bias_correction1),
          .decay = float(1.0 - hyper.lr * hyper.weight_decay),
          .sqrt_correction2 = float(std::sqrt(bias_correction2)),
          .eps = float(hyper.eps),
          .seed = seed,
          .step = hyper.step};
}

AdamWStorage storage_of(OptimizerPrecision precision) {
  switch (precision) {
    case OptimizerPrecision::Fp32Master: return AdamWStorage::F32Master;
    case OptimizerPrecision::Bf16Stochastic: return AdamWStorage::Bf16StochasticRounding;
    case OptimizerPrecision::PureBf16: return AdamWStorage::Bf16NearestRounding;
  }
  fail("adamw_step: unknown optimizer precision {}", int(precision));
}

}  // namespace

OptimizerPrecision parse_optimizer_precision(const std::string& name) {
  // The recipe's spellings (train/recipe.cpp); "fp32" is the CPU engine's mode, which on the GPU means fp32
  // master weights.
  if (name == "fp32" || name == "fp32_master") return OptimizerPrecision::Fp32Master;
  if (name == "bf16_stochastic_rounding") return OptimizerPrecision::Bf16Stochastic;
  if (name == "pure_bf16") return OptimizerPrecision::PureBf16;
  fail("unknown optimizer.precision '{}' (expected fp32_master, bf16_stochastic_rounding or pure_bf16)", name);
}

void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper& hyper, OptimizerPrecision precision,
                const Tensor& grad_scale, uint64_t seed) {
  check_hyper(hyper);
  const AdamWStorage storage = storage_of(precision);
  const bool has_master = precision == OptimizerPrecision::Fp32Master;
  const DType moment_dtype = has_master ? DType::F32 : DType::BF16;
  if (grad_scale.defined())
    MOETUNE_CHECK(grad_scale.device().is_cuda() && grad_scale.dtype() == DType::F32 && grad_scale.numel() == 1,
                  "adamw_step: grad_scale is {}, expected F32 with one element on cuda", grad_scale.str());

  std::vector<AdamWTensorPointers> pointers;
  pointers.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const AdamWSlot& slot = slots[i];
    MOETUNE_CHECK(slot.param.defined(), "adamw_step: slot {}: param is undefined", i);
    const Shape& shape = slot.param.shape();
    check_state(slot.param, "param", i, DType::BF16, shape);
    check_state(slot.grad, "grad", i, DType::BF16, shape);
    check_state(slot.exp_avg, "exp_avg", i, moment_dtype, shape);
    check_state(slot.exp_avg_sq, "exp_avg_sq", i, moment_dtype, shape);
    if (has_master) check_state(slot.master, "master", i, DType::F32, shape);
    else MOETUNE_CHECK(!slot.master.defined(), "adamw_step: slot {}: a master copy ({}) is only kept in fp32 mode", i,
                       slot.master.str());
    pointers.push_back({.param = static_cast<uint16_t*>(slot.param.raw_data()),
                        .grad = static_cast<const uint16_t*>(slot.grad.raw_data()),
                        .exp_avg = slot.exp_avg.raw_data(),
                        .exp_avg_sq = slot.exp_avg_sq.raw_data(),
                        .master = has_master ? static_cast<float*>(slot.master.raw_data()) : nullptr,
                        .numel = slot.param.numel()});
  }
  const float* scale = grad_scale.defined() ? static_cast<const float*>(grad_scale.raw_data()) : nullptr;
  gpu::check(launch_adamw(storage, pointers.data(), int64_t(pointers.size()), scalars_of(hyper, seed), scale,
                          gpu::stream()),
             fmt::format("adamw_step over {} tensors", pointers.size()));
}

}  // namespace moetune::ops::cuda
