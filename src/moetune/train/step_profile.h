// training.profile: the phases of each step (core/phase_profile.h) summed over the run, the first step left out
// (it warms up allocators, cuBLASLt and cuDNN plans), and reported at the end as a table on stderr and as
// output.dir/profile.json: per phase its milliseconds per step and share of the step's wall time.
#pragma once

#include <filesystem>
#include <vector>

#include "moetune/core/phase_profile.h"

namespace moetune::train {

class StepProfile {
 public:
  StepProfile();
  ~StepProfile();
  // After each step (waits for the GPU): its phases and its wall time.
  void step_done(double seconds);
  // The table (stderr) and profile.json in `folder`; nothing when no step after the first was profiled.
  void report(const std::filesystem::path& folder) const;

 private:
  std::vector<PhaseTime> phases_;
  int64_t steps_seen_ = 0, steps_counted_ = 0;
  double seconds_ = 0;
};

}  // namespace moetune::train
