// Files are written under a temporary name beside their destination, flushed to disk, then renamed over
// it, so a crash leaves either the old file or the new one, never half of one.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string_view>

namespace moetune::io {

// Calls `write` with an open FILE*; on success the file appears at `path` whole, on any error not at all.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::FILE*)>& write);
void write_text_atomically(const std::filesystem::path& path, std::string_view text);
// std::filesystem::copy_file leaves a 0-byte file behind when the disk fills and writes through a link planted
// at `to`; this copy appears whole or not at all, and replaces such a link instead.
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);
// fwrite that fails with an Error naming `path` when the disk refuses.
void write_bytes(std::FILE* file, const void* data, size_t nbytes, const std::filesystem::path& path);

}  // namespace moetune::io
