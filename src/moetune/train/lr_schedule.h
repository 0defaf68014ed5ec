// Learning-rate schedules with linear warm-up, as transformers' get_*_schedule_with_warmup define them: the
// rate for optimizer step `step` (0 for the first) is peak · factor(step). Note the first step of a warm-up
// runs at rate 0, as it does in transformers.
#pragma once

#include <cstdint>
#include <string>

namespace moetune::train {

enum class ScheduleKind { Constant, Linear, Cosine };

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::Constant;
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // Linear and Cosine decay to zero at this step
  double min_lr_ratio = 0;  // the floor of the cosine, as a fraction of peak_lr

  double lr(int64_t step) const;
};

// "constant", "linear" or "cosine"; anything else is an Error that lists them.
ScheduleKind schedule_kind(const std::string& name);

}  // namespace moetune::train
