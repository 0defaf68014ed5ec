// One run per output folder. Two runs writing the same checkpoints, rotation and metrics.jsonl destroy each
// other's work, so a run holds an exclusive lock on OUTPUT/.moetune.lock while it lives; a second run is refused
// with the holder's process id and host. The lock is flock(2): the kernel drops it when the holder dies, even
// by kill -9, so a stale lock file never blocks a later run.
#pragma once

#include <filesystem>

namespace moetune::train {

class OutputLock {
 public:
  // Creates `folder` when needed; an Error naming the folder when it cannot be, or when another run holds it.
  explicit OutputLock(const std::filesystem::path& folder);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace moetune::train
