#include "moetune/parallel/watchdog.h"

#include <cstdio>
#include <cstdlib>

#include "moetune/parallel/world.h"

namespace moetune::parallel {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Watchdog::Watchdog(double timeout_seconds) : timeout_seconds_(timeout_seconds), last_progress_ns_(now_ns()) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  thread_.join();
}

void Watchdog::progress(const char* what) {
  last_progress_ns_.store(now_ns());
  waiting_for_.store(what);
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_signal_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    const double idle = double(now_ns() - last_progress_ns_.load()) / 1e9;
    if (idle < timeout_seconds_) continue;
    std::fprintf(stderr,
                 "moetune: %serror: no progress for %.0f s during %s (parallel.timeout_seconds): another rank has "
                 "probably failed or hangs; ending this rank\n",
                 rank_prefix().c_str(), idle, waiting_for_.load());
    std::fflush(stderr);
    std::_Exit(3);  // the collective this rank waits in never returns: no orderly exit is possible
  }
}

}  // namespace moetune::parallel
