#include "moetune/train/micro_batch_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/ops/adamw_math.h"

namespace moetune::train {
namespace {

constexpr int64_t kMaxTokensPerMicroBatch = 16384;
constexpr int64_t kMaxMicroBatch = 256;

double gb(int64_t bytes) { return double(bytes) / 1e9; }

}  // namespace

int64_t usable_gpu_bytes(int64_t device_bytes) {
  // 1.5 GB for the context and the libraries' handles (measured: ~0.6 GB on the H200) and 4% for the pool's
  // rounding and fragmentation.
  return int64_t(double(device_bytes) * 0.96) - int64_t(1.5e9);
}

const model::PrecisionPlan& precision_plan(const std::string& precision, const std::string& state) {
  const std::string name = precision + (state == "int8" ? "+int8" : "");
  for (const model::PrecisionPlan& plan : model::precision_plans())
    if (plan.name == name) return plan;
  fail("optimizer.precision '{}' with optimizer.state '{}' has no memory plan", precision, state);
}

int64_t planned_peak_bytes(const model::ParameterLayout& layout, const model::PrecisionPlan& precision, int64_t tokens,
                           model::Recompute recompute, bool update_in_backward, LoraFit lora, int64_t keep_last_layers,
                           int64_t lm_head_chunk_rows) {
  int64_t blocks = 0, trainable = 0, frozen = 0;
  for (const model::ParameterSpec& p : layout.parameters) {
    (p.trainable ? trainable : frozen) += shape_numel(p.shape);
    if (p.trainable) blocks += ops::adamw_state_blocks(shape_numel(p.shape));
  }
  const int64_t gradients_dropped = trainable - model::gradient_parameters_held(layout, update_in_backward);
  int64_t frozen_bytes = precision.weight_bytes * frozen;
  if (lora.nf4_base) {
    const model::Nf4BasePlan base = model::nf4_base_plan(layout);
    frozen_bytes += base.nf4_bytes + base.scratch_bytes - precision.weight_bytes * base.quantized_parameters;
  }
  const int64_t adapters =
      lora.rank > 0 ? model::lora_gpu_stash_bytes(layout, lora.rank, tokens, recompute, keep_last_layers) : 0;
  return precision.static_bytes(trainable, blocks) - precision.gradient_bytes * gradients_dropped + frozen_bytes +
         model::gpu_activation_plan(layout.spec, tokens, recompute, keep_last_layers, lm_head_chunk_rows,
                                    /*lora=*/lora.rank > 0).total() +
         adapters;
}

MicroBatchFit fit_micro_batch(const model::ParameterLayout& layout, const model::PrecisionPlan& precision,
                              int64_t sequence_length, int64_t device_bytes, model::Recompute recompute,
                              bool update_in_backward, LoraFit lora, int64_t keep_last_layers,
                              int64_t lm_head_chunk_rows) {
  MicroBatchFit fit;
  fit.usable_bytes = usable_gpu_bytes(device_bytes);
  const int64_t cap = std::clamp<int64_t>(kMaxTokensPerMicroBatch / std::max<int64_t>(sequence_length, 1), 1, kMaxMicroBatch);
  // The recipe's mode first, then more recomputation: the feed-forward stashes are the largest, then all.
  std::vector<model::Recompute> order = {recompute};
  if (recompute == model::Recompute::None) order.push_back(model::Recompute::Experts);
  if (recompute != model::Recompute::Full) order.push_back(model::Recompute::Full);
  for (const model::Recompute tried : order) {
    int64_t best = 0;
    for (int64_t rows = 1; rows <= cap; ++rows) {
      const int64_t peak = planned_peak_bytes(layout, precision, rows * sequence_length, tried, update_in_backward, lora, keep_last_layers, lm_head_chunk_rows);
      if (peak > fit.usable_bytes) break;
      best = rows;
      fit.planned_bytes = peak;
    }
    if (best == 0) continue;
    fit.micro_batch_size = best;
    fit.recompute = tried;
    const std::string limit =
        best == cap ? fmt::format("the cap of {} tokens per micro-batch", kMaxTokensPerMicroBatch)
                    : fmt::format("{} rows would plan {:.1f} GB", best + 1,
                                  gb(planned_peak_bytes(layout, precision, (best + 1) * sequence_length, tried, update_in_backward, lora, keep_last_layers, lm_head_chunk_rows)));
    fit.reason = fmt::format(
        "training.micro_batch_size auto: {} row(s) of {} tokens, recompute {} (planned peak {:.1f} GB of {:.1f} GB usable "
        "on this {:.1f} GB GPU, {} precision; {})",
        best, sequence_length, model::recompute_name(tried), gb(fit.planned_bytes), gb(fit.usable_bytes), gb(device_bytes),
        precision.name, limit);
    return fit;
  }
  const int64_t smallest = planned_peak_bytes(layout, precision, sequence_length, model::Recompute::Full, update_in_backward, lora, keep_last_layers, lm_head_chunk_rows);
  fit.reason = fmt::format(
      "training.micro_batch_size auto: not even one row of {} tokens fits: the plan needs {:.1f} GB with full "
      "recomputation, {:.1f} GB are usable on this {:.1f} GB GPU ({} precision). Use several GPUs (parallel.expert), "
      "optimizer.state int8, a shorter data.max_length, or LoRA",
      sequence_length, gb(smallest), gb(fit.usable_bytes), gb(device_bytes), precision.name);
  return fit;
}

}  // namespace moetune::train
