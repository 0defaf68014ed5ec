#include "moetune/data/loader.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"
#include "moetune/ops/loss.h"

namespace moetune::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r\n") == std::string::npos; }

struct Row {
  std::vector<int64_t> ids, labels, positions;
};

// Labels are the ids where scored, -100 elsewhere; a document's first token is never a label, so no document
// is predicted from the one packed before it.
void place(Row& row, const Example& example, int64_t max_length) {
  const size_t length = std::min(example.ids.size(), size_t(max_length));
  for (size_t i = 0; i < length; ++i) {
    row.ids.push_back(example.ids[i]);
    row.labels.push_back(i > 0 && example.scored[i] ? example.ids[i] : ops::kIgnoreIndex);
    row.positions.push_back(int64_t(i));
  }
}

MicroBatch to_batch(const std::vector<Row>& rows) {
  size_t width = 0;
  for (const Row& row : rows) width = std::max(width, row.ids.size());
  const int64_t b = int64_t(rows.size()), l = int64_t(width);
  MicroBatch batch{Tensor::zeros({b, l}, DType::I64), Tensor::zeros({b, l}, DType::I64), Tensor::zeros({b, l}, DType::I64),
                   Tensor::zeros({b, l}, DType::I64), 0, 0};
  for (int64_t r = 0; r < b; ++r) {
    const Row& row = rows[size_t(r)];
    for (int64_t t = 0; t < l; ++t) {
      const bool real = t < int64_t(row.ids.size());
      const int64_t at = r * l + t;
      batch.input_ids.data<int64_t>()[at] = real ? row.ids[size_t(t)] : 0;
      batch.labels.data<int64_t>()[at] = real ? row.labels[size_t(t)] : ops::kIgnoreIndex;
      // Padding continues the positions so it never starts a document of its own; the mask hides it.
      batch.position_ids.data<int64_t>()[at] = real ? row.positions[size_t(t)] : (t > 0 ? batch.position_ids.data<int64_t>()[at - 1] + 1 : 0);
      batch.attention_mask.data<int64_t>()[at] = real ? 1 : 0;
      batch.tokens += real;
      batch.scored += real && t > 0 && row.labels[size_t(t)] != ops::kIgnoreIndex;
    }
  }
  return batch;
}

}  // namespace

SplitLines index_lines(const std::vector<std::filesystem::path>& files, double validation_fraction, uint64_t seed) {
  SplitLines split;
  for (size_t f = 0; f < files.size(); ++f) {
    io::require_regular_file(files[f], "the data file");
    std::ifstream stream(files[f], std::ios::binary);
    if (!stream) fail("{}: cannot open the data file", files[f].string());
    std::string line;
    int64_t number = 0;
    for (uint64_t offset = 0; std::getline(stream, line); offset = uint64_t(stream.tellg())) {
      ++number;
      if (blank(line)) continue;
      const LineRef ref{uint32_t(f), offset, number};
      const bool held_out = validation_fraction > 0 &&
                            double(splitmix64(seed ^ (uint64_t(f) << 40) ^ uint64_t(number)) % 1000000) <
                                validation_fraction * 1e6;
      (held_out ? split.validation : split.train).push_back(ref);
      if (stream.eof()) break;
    }
  }
  return split;
}

DataLoader::DataLoader(std::vector<std::filesystem::path> files, std::vector<LineRef> lines, TextCodec codec,
                       LoaderOptions options)
    : files_(std::move(files)), lines_(std::move(lines)), codec_(std::move(codec)), options_(options) {
  if (lines_.empty()) fail("{}: no examples: the data files hold no non-blank lines", file_names());
  for (const auto& file : files_) streams_.push_back(std::make_unique<std::ifstream>(file, std::ios::binary));
}

std::string DataLoader::file_names() const {
  std::string names;
  for (const auto& file : files_) names += (names.empty() ? "" : ", ") + file.string();
  return names;
}

std::vector<size_t> DataLoader::order(int64_t epoch) const {
  if (!options_.mixing.empty()) return mixed_order(lines_, options_.mixing, options_.seed, epoch, options_.shuffle);
  std::vector<size_t> indices(lines_.size());
  std::iota(indices.begin(), indices.end(), 0);
  if (options_.shuffle) std::shuffle(indices.begin(), indices.end(), std::mt19937_64(options_.seed * 1000003ull + uint64_t(epoch)));
  return indices;
}

std::optional<Example> DataLoader::read(size_t line_index) {
  const LineRef& ref = lines_[line_index];
  std::ifstream& stream = *streams_[ref.file];
  stream.clear();
  stream.seekg(std::streamoff(ref.offset));
  std::string text;
  std::getline(stream, text);
  try {
    return make_example(options_.mapping.apply(io::parse_json_text<Json>(text, "")), options_.format, codec_,
                        options_.loss_on_prompt);
  } catch (const Error& e) {
    if (!options_.skip_bad_lines) fail("{}: line {}: {}", files_[ref.file].string(), ref.line_number, e.what());
    ++skipped_;
    return std::nullopt;
  }
}

MicroBatch DataLoader::next(bool single_pass) {
  std::vector<Row> rows;
  int64_t lines_read = 0;
  while (int64_t(rows.size()) < options_.micro_batch_size) {
    if (++lines_read > int64_t(lines_.size()) && !single_pass)
      fail("{}: one micro-batch of {} rows of up to {} tokens would take more than all {} lines of the data: lower "
           "training.micro_batch_size or data.max_length",
           file_names(), options_.micro_batch_size, options_.max_length, lines_.size());
    if (position_.cursor >= int64_t(lines_.size())) {
      if (single_pass) break;
      position_ = {position_.epoch + 1, 0};
    }
    if (order_epoch_ != position_.epoch) {
      order_ = order(position_.epoch);
      order_epoch_ = position_.epoch;
    }
    std::optional<Example> example = read(order_[size_t(position_.cursor)]);
    if (!example) {
      ++position_.cursor;
      if (skipped_in_a_row_++ >= int64_t(lines_.size())) fail("every line of the data is bad (skipped {})", skipped_);
      continue;
    }
    skipped_in_a_row_ = 0;
    const size_t length = std::min(example->ids.size(), size_t(options_.max_length));
    const bool fits = options_.packing && !rows.empty() && rows.back().ids.size() + length <= size_t(options_.max_length);
    if (!fits) {
      if (int64_t(rows.size()) == options_.micro_batch_size) break;
      rows.emplace_back();
    }
    place(rows.back(), *example, options_.max_length);
    ++position_.cursor;
    // Without packing a row holds one example; with it, keep filling the last row until one does not fit.
    if (!options_.packing && int64_t(rows.size()) == options_.micro_batch_size) break;
  }
  if (rows.empty()) return {};
  return to_batch(rows);
}

double DataLoader::epochs_done() const { return double(position_.epoch) + double(position_.cursor) / double(lines_.size()); }

}  // namespace moetune::data
