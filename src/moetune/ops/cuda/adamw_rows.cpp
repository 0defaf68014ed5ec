#include "moetune/ops/cuda/adamw_rows.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/adamw_rows_kernels.h"

namespace moetune::ops::cuda {
namespace {

AdamWStorage storage_of(OptimizerPrecision precision) {
  switch (precision) {
    case OptimizerPrecision::Fp32Master: return AdamWStorage::F32Master;
    case OptimizerPrecision::Bf16Stochastic: return AdamWStorage::Bf16StochasticRounding;
    case OptimizerPrecision::PureBf16: return AdamWStorage::Bf16NearestRounding;
  }
  fail("AdamWLazyRows: unknown optimizer precision {}", int(precision));
}

int32_t checked_step(int64_t steps) {
  MOETUNE_CHECK(steps >= 0 && steps < std::numeric_limits<int32_t>::max(), "AdamWLazyRows: step {} out of range", steps);
  return int32_t(steps);
}

Tensor int32_filled(int64_t count, int32_t value) {
  return Tensor::from_vector<int32_t>(std::vector<int32_t>(size_t(count), value), {count}).to(Device::cuda());
}

}  // namespace

AdamWLazyRows::AdamWLazyRows(const AdamWSlot& slot, size_t position, OptimizerPrecision precision, uint64_t seed,
                             int64_t steps_taken)
    : slot_(slot), position_(position), precision_(precision), seed_(seed) {
  MOETUNE_CHECK(slot.param.defined() && slot.param.dim() == 2 && slot.param.device().is_cuda(),
                "AdamWLazyRows: the table must be a [rows, row_length] CUDA tensor, not {}",
                slot.param.defined() ? slot.param.str() : "undefined");
  MOETUNE_CHECK(!slot.exp_avg_absmax.defined(), "AdamWLazyRows: 8-bit moments are updated in blocks, not rows");
  MOETUNE_CHECK(slot.grad.defined() && slot.grad.shape() == slot.param.shape() && slot.grad.dtype() == DType::BF16,
                "AdamWLazyRows: the gradient must be BF16 {}", shape_str(slot.param.shape()));
  rows_ = slot.param.size(0);
  row_length_ = slot.param.size(1);
  MOETUNE_CHECK(row_length_ % 8 == 0, "AdamWLazyRows: rows of {} elements (a multiple of 8 keeps 16-byte accesses in "
                "one row)", row_length_);
  MOETUNE_CHECK(rows_ < std::numeric_limits<int32_t>::max(), "AdamWLazyRows: {} rows", rows_);
  last_step_ = int32_filled(rows_, checked_step(steps_taken));
  marked_ = int32_filled(rows_, 0);
  marked_list_ = Tensor::empty({rows_}, DType::I32, Device::cuda());
  marked_count_ = int32_filled(1, 0);
  reserve_history(steps_taken + 64);
}

void AdamWLazyRows::reserve_history(int64_t steps) {
  if (steps < history_capacity_) return;
  const int64_t capacity = std::max<int64_t>(steps + 1, 2 * history_capacity_);
  Tensor grown = Tensor::empty({capacity * int64_t(sizeof(AdamWStepRecord))}, DType::U8, Device::cuda());
  if (history_capacity_ > 0)
    gpu::check(cudaMemcpyAsync(grown.raw_data(), history_.raw_data(), history_.nbytes(), cudaMemcpyDeviceToDevice,
                               gpu::stream()),
               "AdamWLazyRows: growing the step history");
  history_ = grown;  // the old buffer's release is stream-ordered after the copy
  history_capacity_ = capacity;
}

AdamWRows AdamWLazyRows::pointers() const {
  auto* grad = static_cast<uint16_t*>(slot_.grad.raw_data());
  return {.table = {static_cast<uint16_t*>(slot_.param.raw_data()), grad, slot_.exp_avg.raw_data(),
                    slot_.exp_avg_sq.raw_data(),
                    slot_.master.defined() ? static_cast<float*>(slot_.master.raw_data()) : nullptr,
                    rows_ * row_length_},
          .grad = grad,
          .rows = rows_,
          .row_length = row_length_,
          .last_step = static_cast<int32_t*>(last_step_.raw_data()),
          .marked = static_cast<int32_t*>(marked_.raw_data()),
          .marked_list = static_cast<int32_t*>(marked_list_.raw_data()),
          .marked_count = static_cast<int32_t*>(marked_count_.raw_data()),
          .history = static_cast<AdamWStepRecord*>(history_.raw_data()),
          .seed = seed_,
          .position = int64_t(position_)};
}

void AdamWLazyRows::catch_up(const Tensor& ids, int64_t steps_taken) {
  MOETUNE_CHECK(ids.device().is_cuda() && ids.dtype() == DType::I32 && ids.dim() == 1,
                "AdamWLazyRows::catch_up: ids {} must be CUDA I32 [T]", ids.str());
  gpu::check(launch_adamw_rows_catch_up(storage_of(precision_), pointers(),
                                        static_cast<const int32_t*>(ids.raw_data()), ids.numel(),
                                        checked_step(steps_taken), gpu::stream()),
             "AdamWLazyRows: bringing the batch's rows up to date");
}

void AdamWLazyRows::flush(int64_t steps_taken) {
  gpu::check(launch_adamw_rows_flush(storage_of(precision_), pointers(), checked_step(steps_taken),
                                     gpu::stream()),
             "AdamWLazyRows: bringing every row up to date");
}

void AdamWLazyRows::reset(int64_t steps_taken) {
  last_step_ = int32_filled(rows_, checked_step(steps_taken));
  marked_ = int32_filled(rows_, 0);
  marked_count_ = int32_filled(1, 0);
  reserve_history(steps_taken + 64);
}

void AdamWLazyRows::step(const AdamWScalars& scalars, const Tensor& grad_scale, float* norm_partials) {
  checked_step(scalars.step);
  reserve_history(scalars.step);
  const float* scale = grad_scale.defined() ? static_cast<const float*>(grad_scale.raw_data()) : nullptr;
  gpu::check(launch_adamw_rows_step(storage_of(precision_), pointers(), scalars, scale, norm_partials,
                                    gpu::stream()),
             "AdamWLazyRows: the step on the marked rows");
}

}  // namespace moetune::ops::cuda
