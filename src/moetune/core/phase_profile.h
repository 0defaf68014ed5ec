// Where a GPU step's time goes: PhaseScope brackets a phase of the step ("moe.dispatch", "attention.bwd") with
// two CUDA events on the current stream, so a phase's time is the GPU's time between its first and its last
// queued op (waits for other streams and for the host included: that is time the step spends there). Off by
// default (training.profile turns it on): a scope then costs one branch. Phases may nest; each reports its own
// whole time. Without CUDA everything is a no-op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moetune {

struct PhaseTime {
  std::string name;
  double milliseconds = 0;
  int64_t calls = 0;
};

void enable_phase_profile(bool on);
bool phase_profile_enabled();

class PhaseScope {
 public:
  explicit PhaseScope(const char* name);
  ~PhaseScope();
  // Ends this phase and starts the next one (a block's phases in sequence).
  void next(const char* name);
  void end();  // before the scope ends (e.g. before the host waits for the GPU)
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  int64_t index_ = -1;  // the phase's slot among this round's records; -1: not profiling
};

// Waits for the GPU and returns the time of each phase recorded since the last call, summed by name, in the
// order each name first appeared; then starts a new round.
std::vector<PhaseTime> take_phase_times();

// Adds `more` into `total` by name (keeping total's order, new names at the end).
void add_phase_times(std::vector<PhaseTime>& total, const std::vector<PhaseTime>& more);

}  // namespace moetune
