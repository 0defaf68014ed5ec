// Reading files a user names: only regular files. open() on a FIFO blocks until a writer comes, a device such as
// /dev/zero never ends, and a folder is no file; each is refused with an error naming the path. Writing: never
// through a symbolic link planted where a run writes its outputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace moetune::io {

// An Error naming `path` and its `role` ("the data file") unless it is a regular file (symlinks followed).
void require_regular_file(const std::filesystem::path& path, std::string_view role);
// The whole of a regular file of at most `max_bytes` bytes.
std::string read_regular_file(const std::filesystem::path& path, std::string_view role, uint64_t max_bytes);

enum class WriteMode { kTruncate, kAppend, kCreateNew };
// `path` opened for binary writing (created when absent); a symbolic link at `path` is an Error naming it.
std::FILE* open_for_writing(const std::filesystem::path& path, WriteMode mode);

}  // namespace moetune::io
