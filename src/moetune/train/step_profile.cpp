#include "moetune/train/step_profile.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "moetune/io/atomic_file.h"

namespace moetune::train {

StepProfile::StepProfile() { enable_phase_profile(true); }
StepProfile::~StepProfile() { enable_phase_profile(false); }

void StepProfile::step_done(double seconds) {
  const std::vector<PhaseTime> phases = take_phase_times();
  if (steps_seen_++ == 0) return;  // warm-up
  add_phase_times(phases_, phases);
  seconds_ += seconds;
  ++steps_counted_;
}

void StepProfile::report(const std::filesystem::path& folder) const {
  if (steps_counted_ == 0) return;
  const double step_ms = 1e3 * seconds_ / double(steps_counted_);
  nlohmann::json phases = nlohmann::json::array();
  std::fprintf(stderr, "profile: %lld steps (the first left out), %.2f ms per step (wall); phases may nest\n",
               static_cast<long long>(steps_counted_), step_ms);
  std::fprintf(stderr, "  %-28s %10s %7s %8s\n", "phase", "ms/step", "share", "calls");
  for (const PhaseTime& p : phases_) {
    const double ms = p.milliseconds / double(steps_counted_);
    std::fprintf(stderr, "  %-28s %10.3f %6.1f%% %8.1f\n", p.name.c_str(), ms, 100.0 * ms / step_ms,
                 double(p.calls) / double(steps_counted_));
    phases.push_back({{"phase", p.name}, {"ms_per_step", ms}, {"share_of_step", ms / step_ms},
                      {"calls_per_step", double(p.calls) / double(steps_counted_)}});
  }
  const nlohmann::json record = {{"steps", steps_counted_}, {"step_ms", step_ms}, {"phases", phases}};
  io::write_text_atomically(folder / "profile.json", record.dump(2) + "\n");
}

}  // namespace moetune::train
