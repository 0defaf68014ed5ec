#include "moetune/data/gzip_file.h"

#include <zlib.h>

#include <memory>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/io/atomic_file.h"

namespace moetune::data {

namespace fs = std::filesystem;

fs::path decompress_gzip(const fs::path& compressed, const fs::path& target) {
  const std::unique_ptr<gzFile_s, decltype(&gzclose)> in(gzopen(compressed.c_str(), "rb"), &gzclose);
  if (!in) fail("{}: cannot open the data file", compressed.string());
  // Without this zlib passes a file that is not gzip through unchanged, and a .gz of plain text would train.
  if (gzdirect(in.get())) fail("{}: named .gz but not gzip-compressed", compressed.string());
  fs::create_directories(target.parent_path());
  io::write_file_atomically(target, [&](std::FILE* out) {
    std::vector<char> buffer(1 << 20);
    for (;;) {
      const int got = gzread(in.get(), buffer.data(), unsigned(buffer.size()));
      if (got < 0) {
        int code = 0;
        fail("{}: cannot decompress: {}", compressed.string(), gzerror(in.get(), &code));
      }
      if (got == 0) break;
      io::write_bytes(out, buffer.data(), size_t(got), target);
    }
    int code = Z_OK;
    const char* message = gzerror(in.get(), &code);
    if (code != Z_OK) fail("{}: cannot decompress ({}: cut short?)", compressed.string(), message);
  });
  return target;
}

}  // namespace moetune::data
