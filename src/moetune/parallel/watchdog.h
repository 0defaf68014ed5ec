// No rank of a job waits forever: when a rank dies or hangs, the others block in their next collective (NCCL
// and MPI have no default timeout). The watchdog ends this process when the trainer has not reported progress
// for `timeout_seconds` (a step, a checkpoint, a validation pass), naming the rank and the wait, so a launcher
// or scheduler sees the job fail instead of hold its GPUs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace moetune::parallel {

class Watchdog {
 public:
  explicit Watchdog(double timeout_seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Progress: the clock starts again. `what` names what comes next, for the message.
  void progress(const char* what);

 private:
  void watch();

  double timeout_seconds_;
  std::atomic<int64_t> last_progress_ns_;
  std::atomic<const char*> waiting_for_{"start-up"};
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moetune::parallel
