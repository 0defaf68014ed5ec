#include "moetune/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "moetune/core/error.h"

namespace moetune::train {

double LrSchedule::lr(int64_t step) const {
  if (step < warmup_steps) return peak_lr * double(step) / double(std::max<int64_t>(1, warmup_steps));
  const double progress = double(step - warmup_steps) / double(std::max<int64_t>(1, total_steps - warmup_steps));
  switch (kind) {
    case ScheduleKind::Constant: return peak_lr;
    case ScheduleKind::Linear: return peak_lr * std::max(0.0, 1.0 - progress);
    case ScheduleKind::Cosine: {
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, progress)));
      return peak_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine);
    }
  }
  return peak_lr;
}

ScheduleKind schedule_kind(const std::string& name) {
  if (name == "constant") return ScheduleKind::Constant;
  if (name == "linear") return ScheduleKind::Linear;
  if (name == "cosine") return ScheduleKind::Cosine;
  fail("learning-rate schedule '{}' is not one of: constant, linear, cosine", name);
}

}  // namespace moetune::train
