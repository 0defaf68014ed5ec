#include "moetune/data/token_jsonl.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"

namespace moetune::data {

using nlohmann::json;

namespace {

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

}  // namespace

TokenJsonlReader::TokenJsonlReader(std::filesystem::path path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size) {
  io::require_regular_file(path_, "the data file");
  stream_.open(path_);
  if (!stream_) fail("{}: cannot open the data file: {}", path_.string(), std::strerror(errno));
}

std::optional<TokenSequence> TokenJsonlReader::next() {
  std::string line;
  while (std::getline(stream_, line)) {
    ++line_number_;
    if (is_blank(line)) continue;
    return with_context(fmt::format("{}: line {}", path_.string(), line_number_),
                        [&] { return TokenSequence{line_number_, parse_line(line)}; });
  }
  // getline stops on a failed read (a folder given as the file, an I/O error) as it does at the end; only the
  // bad bit tells them apart.
  if (stream_.bad()) fail("{}: line {}: read error: {}", path_.string(), line_number_ + 1, std::strerror(errno));
  return std::nullopt;
}

std::vector<int64_t> TokenJsonlReader::parse_line(const std::string& line) const {
  const json object = io::parse_json_text(line, "");
  if (!object.is_object()) fail("expected an object {{\"input_ids\": [...]}}, got {}", object.type_name());
  const auto ids = object.find("input_ids");
  if (ids == object.end()) fail("no \"input_ids\" key");
  if (!ids->is_array()) fail("\"input_ids\" must be an array of integers, got {}", ids->type_name());

  std::vector<int64_t> input_ids;
  input_ids.reserve(ids->size());
  for (size_t index = 0; index < ids->size(); ++index) {
    const json& id = (*ids)[index];
    if (!id.is_number_integer()) fail("\"input_ids\"[{}] is {}, not an integer", index, io::abbreviated_dump(id));
    // An id past int64's range reads as negative here, so it is rejected too; the message quotes the text.
    const auto value = id.get<int64_t>();
    if (value < 0 || value >= vocab_size_)
      fail("token id {} at index {} is outside the vocabulary [0, {})", id.dump(), index, vocab_size_);
    input_ids.push_back(value);
  }
  if (input_ids.size() < 2)
    fail("{} token(s), nothing to predict: every token after the first is scored, so a line needs 2 or more",
         input_ids.size());
  return input_ids;
}

}  // namespace moetune::data
