#include "moetune/io/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/io/regular_file.h"

namespace moetune::io {

void write_bytes(std::FILE* file, const void* data, size_t nbytes, const std::filesystem::path& path) {
  if (nbytes && std::fwrite(data, 1, nbytes, file) != nbytes)
    fail("{}: write failed: {}", path.string(), std::strerror(errno));
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::FILE*)>& write) {
  std::filesystem::path temporary = path;
  temporary += fmt::format(".tmp.{}", ::getpid());
  // A new file of our own, never written through a link planted at the temporary name (what an earlier crash
  // of this pid left there is removed first; remove() takes a link itself, not its target).
  std::filesystem::remove(temporary);
  std::FILE* file = open_for_writing(temporary, WriteMode::kCreateNew);
  try {
    write(file);
    if (std::fflush(file) != 0 || ::fsync(fileno(file)) != 0)
      fail("{}: flush failed: {}", temporary.string(), std::strerror(errno));
  } catch (...) {
    std::fclose(file);
    std::filesystem::remove(temporary);
    throw;
  }
  if (std::fclose(file) != 0) {
    std::filesystem::remove(temporary);
    fail("{}: close failed: {}", temporary.string(), std::strerror(errno));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary);
    fail("{}: cannot rename into place: {}", path.string(), error.message());
  }
}

void write_text_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, [&](std::FILE* file) { write_bytes(file, text.data(), text.size(), path); });
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to) {
  require_regular_file(from, "the file to copy");
  std::ifstream source(from, std::ios::binary);
  if (!source) fail("{}: cannot open: {}", from.string(), std::strerror(errno));
  write_file_atomically(to, [&](std::FILE* file) {
    std::vector<char> buffer(size_t(1) << 20);
    while (source.read(buffer.data(), std::streamsize(buffer.size())) || source.gcount() > 0)
      write_bytes(file, buffer.data(), size_t(source.gcount()), to);
    if (source.bad()) fail("{}: read failed: {}", from.string(), std::strerror(errno));
  });
}

}  // namespace moetune::io
