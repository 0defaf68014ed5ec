#include "moetune/train/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "moetune/core/error.h"

namespace moetune::train {

namespace fs = std::filesystem;

namespace {

std::string holder_description() {
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  return fmt::format("pid {} on {}", ::getpid(), host);
}

std::string read_holder(int fd) {
  char text[512] = "";
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::string(text, size_t(n)) : "a process that has not written its name yet";
}

}  // namespace

OutputLock::OutputLock(const fs::path& folder) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (!fs::is_directory(folder)) {
    fail("{}: output.dir cannot be used as the output folder: {}", folder.string(),
         error ? error.message() : "it exists and is not a folder");
  }
  const fs::path path = folder / ".moetune.lock";
  // O_NOFOLLOW: a link planted here must not make the run write elsewhere.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) fail("{}: cannot create the lock file (is output.dir writable?): {}", path.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int reason = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    if (reason == EWOULDBLOCK)
      fail("{}: another moetune run is using this output.dir ({}); wait for it, or choose another output.dir",
           folder.string(), holder);
    fail("{}: cannot lock: {}", path.string(), std::strerror(reason));
  }
  const std::string holder = holder_description();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size())) {
    const int reason = errno;
    ::close(fd_);
    fail("{}: cannot write the lock file: {}", path.string(), std::strerror(reason));
  }
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace moetune::train
