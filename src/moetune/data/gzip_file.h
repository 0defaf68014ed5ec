// Gzip-compressed data files, decompressed with zlib.
#pragma once

#include <filesystem>

namespace moetune::data {

// Writes the decompressed bytes of `compressed` to `target` (atomically) and returns `target`. A file that is not
// gzip, or is cut short, is an Error naming it.
std::filesystem::path decompress_gzip(const std::filesystem::path& compressed, const std::filesystem::path& target);

}  // namespace moetune::data
