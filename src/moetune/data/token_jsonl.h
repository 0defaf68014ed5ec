// Token-id JSONL: one sequence per line, {"input_ids": [ints...]} (other keys are ignored). The file is read one
// line at a time, so its size does not matter; a bad line is an Error naming the file and its 1-based line number.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

namespace moetune::data {

struct TokenSequence {
  int64_t line_number = 0;  // 1-based, counting blank lines, as an editor shows it
  std::vector<int64_t> input_ids;
};

class TokenJsonlReader {
 public:
  // Opens `path` (an Error if it cannot be read). Every id must lie in [0, vocab_size).
  TokenJsonlReader(std::filesystem::path path, int64_t vocab_size);

  // The next non-blank line's ids, or nullopt at the end of the file. A line with fewer than two ids is an
  // Error: a causal LM scores token t+1 from tokens 0..t, so a single token gives it nothing to predict.
  std::optional<TokenSequence> next();

  const std::filesystem::path& path() const { return path_; }

 private:
  std::vector<int64_t> parse_line(const std::string& line) const;

  std::filesystem::path path_;
  int64_t vocab_size_;
  std::ifstream stream_;
  int64_t line_number_ = 0;
};

}  // namespace moetune::data
