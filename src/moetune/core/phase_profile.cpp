#include "moetune/core/phase_profile.h"

#include <algorithm>
#include <map>

#if MOETUNE_HAVE_CUDA
#include "moetune/core/cuda_runtime.h"
#endif

namespace moetune {
namespace {

bool enabled = false;

#if MOETUNE_HAVE_CUDA
struct Record {
  const char* name;
  cudaEvent_t start, stop;
};
// Events are made once and reused every round: creating them per phase would cost more than the phase.
std::vector<cudaEvent_t> pool;
size_t pool_used = 0;
std::vector<Record> records;

cudaEvent_t next_event() {
  if (pool_used == pool.size()) {
    cudaEvent_t event = nullptr;
    gpu::check(cudaEventCreate(&event), "a profiling event");
    pool.push_back(event);
  }
  return pool[pool_used++];
}
#endif

}  // namespace

void enable_phase_profile(bool on) { enabled = on; }
bool phase_profile_enabled() { return enabled; }

PhaseScope::PhaseScope(const char* name) { next(name); }

void PhaseScope::next(const char* name) {
#if MOETUNE_HAVE_CUDA
  if (index_ >= 0 && size_t(index_) < records.size())
    gpu::check(cudaEventRecord(records[size_t(index_)].stop, gpu::stream()), "a profiling event");
  index_ = -1;
  if (!enabled) return;
  index_ = int64_t(records.size());
  records.push_back({name, next_event(), next_event()});
  gpu::check(cudaEventRecord(records.back().start, gpu::stream()), "a profiling event");
#else
  (void)name;
#endif
}

void PhaseScope::end() {
#if MOETUNE_HAVE_CUDA
  if (index_ >= 0 && size_t(index_) < records.size()) cudaEventRecord(records[size_t(index_)].stop, gpu::stream());
#endif
  index_ = -1;
}

PhaseScope::~PhaseScope() { end(); }

std::vector<PhaseTime> take_phase_times() {
  std::vector<PhaseTime> times;
#if MOETUNE_HAVE_CUDA
  if (records.empty()) return times;
  // Every stream: phases also run on the collectives' own streams.
  gpu::check(cudaDeviceSynchronize(), "waiting for the profiled work");
  std::map<std::string, size_t> slot;
  for (const Record& r : records) {
    float ms = 0;
    gpu::check(cudaEventElapsedTime(&ms, r.start, r.stop), "a profiled phase's time");
    auto [at, added] = slot.emplace(r.name, times.size());
    if (added) times.push_back({r.name, 0.0, 0});
    times[at->second].milliseconds += ms;
    ++times[at->second].calls;
  }
  records.clear();
  pool_used = 0;
#endif
  return times;
}

void add_phase_times(std::vector<PhaseTime>& total, const std::vector<PhaseTime>& more) {
  for (const PhaseTime& m : more) {
    auto it = std::find_if(total.begin(), total.end(), [&](const PhaseTime& t) { return t.name == m.name; });
    if (it == total.end()) {
      total.push_back(m);
    } else {
      it->milliseconds += m.milliseconds;
      it->calls += m.calls;
    }
  }
}

}  // namespace moetune
