#include "moetune/io/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "moetune/core/error.h"

namespace moetune::io {

namespace fs = std::filesystem;

namespace {

std::string_view kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::not_found: return "it does not exist";
    case fs::file_type::directory: return "it is a folder";
    case fs::file_type::fifo: return "it is a FIFO (named pipe)";
    case fs::file_type::character:
    case fs::file_type::block: return "it is a device";
    case fs::file_type::socket: return "it is a socket";
    default: return "it is not a regular file";
  }
}

}  // namespace

void require_regular_file(const fs::path& path, std::string_view role) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error && status.type() != fs::file_type::not_found)
    fail("{}: cannot read {}: {}", path.string(), role, error.message());
  if (status.type() != fs::file_type::regular) fail("{}: cannot open {}: {}", path.string(), role, kind_of(status.type()));
}

std::string read_regular_file(const fs::path& path, std::string_view role, uint64_t max_bytes) {
  require_regular_file(path, role);
  const uint64_t size = fs::file_size(path);
  if (size > max_bytes) fail("{}: {} is {} bytes, more than the {} this reader accepts", path.string(), role, size, max_bytes);
  std::ifstream stream(path, std::ios::binary);
  if (!stream) fail("{}: cannot open {}: {}", path.string(), role, std::strerror(errno));
  std::string bytes(size, '\0');
  if (!stream.read(bytes.data(), std::streamsize(size))) fail("{}: cannot read {}: {}", path.string(), role, std::strerror(errno));
  return bytes;
}

std::FILE* open_for_writing(const fs::path& path, WriteMode mode) {
  const int how = mode == WriteMode::kTruncate ? O_TRUNC : mode == WriteMode::kAppend ? O_APPEND : O_EXCL;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | how, 0644);
  std::FILE* file = fd >= 0 ? ::fdopen(fd, mode == WriteMode::kAppend ? "ab" : "wb") : nullptr;
  if (!file) {
    const int reason = errno;
    if (fd >= 0) ::close(fd);
    fail("{}: cannot open for writing{}: {}", path.string(), reason == ELOOP ? " (a symbolic link is refused)" : "",
         std::strerror(reason));
  }
  return file;
}

}  // namespace moetune::io
