#include "moetune/ops/cuda/adamw.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/blockwise_quant.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/adamw_rows.h"
#include "moetune/ops/cuda/grad_norm_kernels.h"

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

AdamWScalars scalars_of(const AdamWHyper& hyper, uint64_t seed) {
  return {adamw_constants(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay, hyper.step), seed, hyper.step};
}

// bitsandbytes' signed and unsigned dynamic maps, one after the other, and the buckets of their midpoints, uploaded
// once and kept for the process (the GPU engine drives one device).
DynamicCodes dynamic_codes_on_device() {
  static const std::pair<Tensor, Tensor>* codes = [] {
    std::vector<float> both(dynamic_map_signed().begin(), dynamic_map_signed().end());
    both.insert(both.end(), dynamic_map_unsigned().begin(), dynamic_map_unsigned().end());
    const CodeBuckets signed_buckets = CodeBuckets::build(code_midpoints(dynamic_map_signed().data(), 256));
    const CodeBuckets unsigned_buckets = CodeBuckets::build(code_midpoints(dynamic_map_unsigned().data(), 256));
    std::vector<CodeBucket> buckets = signed_buckets.positive;
    buckets.insert(buckets.end(), signed_buckets.negative.begin(), signed_buckets.negative.end());
    buckets.insert(buckets.end(), unsigned_buckets.positive.begin(), unsigned_buckets.positive.end());
    std::vector<uint8_t> bytes(buckets.size() * sizeof(CodeBucket));
    std::memcpy(bytes.data(), buckets.data(), bytes.size());
    return new std::pair<Tensor, Tensor>(Tensor::from_vector<float>(both, {int64_t(both.size())}).to(Device::cuda()),
                                         Tensor::from_vector<uint8_t>(bytes, {int64_t(bytes.size())}).to(Device::cuda()));
  }();
  return {static_cast<const float*>(codes->first.raw_data()), static_cast<const CodeBucket*>(codes->second.raw_data())};
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
                const Tensor& grad_scale, uint64_t seed, bool int8_state, const Tensor& norm_squared,
                AdamWLazyRows* lazy) {
  check_hyper(hyper);
  if (lazy) {
    MOETUNE_CHECK(!int8_state, "adamw_step: a lazily updated slot with 8-bit state");
    MOETUNE_CHECK(lazy->position() < slots.size() && slots[lazy->position()].param.raw_data() == lazy->slot().param.raw_data(),
                  "adamw_step: the lazily updated table is not slot {}", lazy->position());
  }
  const AdamWStorage storage = storage_of(precision);
  const bool has_master = precision == OptimizerPrecision::Fp32Master;
  const DType moment_dtype = int8_state ? DType::U8 : has_master ? DType::F32 : DType::BF16;
  if (grad_scale.defined())
    MOETUNE_CHECK(grad_scale.device().is_cuda() && grad_scale.dtype() == DType::F32 && grad_scale.numel() == 1,
                  "adamw_step: grad_scale is {}, expected F32 with one element on cuda", grad_scale.str());

  std::vector<AdamWTensorPointers> pointers;
  std::vector<AdamWInt8TensorPointers> int8_pointers;
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
    auto* master = has_master ? static_cast<float*>(slot.master.raw_data()) : nullptr;
    auto* param = static_cast<uint16_t*>(slot.param.raw_data());
    const auto* grad = static_cast<const uint16_t*>(slot.grad.raw_data());
    if (!int8_state) {
      MOETUNE_CHECK(!slot.exp_avg_absmax.defined() && !slot.exp_avg_sq_absmax.defined(),
                    "adamw_step: slot {}: absmax values are only kept with 8-bit state", i);
      pointers.push_back({param, grad, slot.exp_avg.raw_data(), slot.exp_avg_sq.raw_data(), master, slot.param.numel()});
      continue;
    }
    const Shape blocks = {adamw_state_blocks(slot.param.numel())};
    check_state(slot.exp_avg_absmax, "exp_avg_absmax", i, DType::F32, blocks);
    check_state(slot.exp_avg_sq_absmax, "exp_avg_sq_absmax", i, DType::F32, blocks);
    int8_pointers.push_back({param, grad, static_cast<uint8_t*>(slot.exp_avg.raw_data()),
                             static_cast<uint8_t*>(slot.exp_avg_sq.raw_data()),
                             static_cast<float*>(slot.exp_avg_absmax.raw_data()),
                             static_cast<float*>(slot.exp_avg_sq_absmax.raw_data()), master, slot.param.numel()});
  }
  const float* scale = grad_scale.defined() ? static_cast<const float*>(grad_scale.raw_data()) : nullptr;
  const AdamWScalars scalars = scalars_of(hyper, seed);
  // The norm's workspace: the kernels' per-chunk partials, then the final sum's scratch. Stream-ordered: back to
  // the pool after the kernels that use it, without waiting.
  Tensor norm_workspace;
  int64_t partial_count = 0;
  if (norm_squared.defined()) {
    MOETUNE_CHECK(norm_squared.device().is_cuda() && norm_squared.dtype() == DType::F32 && norm_squared.numel() == 1,
                  "adamw_step: norm_squared is {}, expected F32 with one element on cuda", norm_squared.str());
    std::vector<int64_t> numels;
    for (const AdamWSlot& slot : slots) numels.push_back(slot.param.numel());
    partial_count = adamw_norm_partial_count(numels.data(), int64_t(numels.size()));
    norm_workspace = Tensor::empty({partial_count + kFloatSumScratch}, DType::F32, Device::cuda());
  }
  float* partials = norm_workspace.defined() ? static_cast<float*>(norm_workspace.raw_data()) : nullptr;
  if (lazy) {
    // The slots before the table, the table row by row, the slots after it: each with its position in the whole
    // list and its partials where the launch over the whole list puts them, so the bits are that launch's.
    const int64_t table = int64_t(lazy->position()), count = int64_t(pointers.size());
    const auto partials_at = [&](int64_t slot) -> float* {
      if (!partials) return nullptr;
      std::vector<int64_t> numels;
      for (int64_t i = 0; i < slot; ++i) numels.push_back(pointers[size_t(i)].numel);
      return partials + adamw_norm_partial_count(numels.data(), slot);
    };
    gpu::check(launch_adamw(storage, pointers.data(), table, scalars, scale, partials_at(0), gpu::stream()),
               fmt::format("adamw_step over the {} tensors before the lazily updated one", table));
    lazy->step(scalars, grad_scale, partials_at(table));
    gpu::check(launch_adamw(storage, pointers.data() + table + 1, count - table - 1, scalars, scale,
                            partials_at(table + 1), gpu::stream(), table + 1),
               fmt::format("adamw_step over the {} tensors after the lazily updated one", count - table - 1));
  } else {
    const cudaError_t status =
        int8_state ? launch_adamw_int8(storage, int8_pointers.data(), int64_t(int8_pointers.size()), scalars, scale,
                                       dynamic_codes_on_device(), partials, gpu::stream())
                   : launch_adamw(storage, pointers.data(), int64_t(pointers.size()), scalars, scale, partials,
                                  gpu::stream());
    gpu::check(status, fmt::format("adamw_step over {} tensors{}", slots.size(), int8_state ? " (8-bit state)" : ""));
  }
  if (partials)
    gpu::check(launch_float_sum(partials, partial_count, partials + partial_count,
                                static_cast<float*>(norm_squared.raw_data()), gpu::stream()),
               "adamw_step: the gradient norm's sum");
}

}  // namespace moetune::ops::cuda
