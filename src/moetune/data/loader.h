// Micro-batches from JSONL files. One streaming pass indexes where each line starts (the files are never held in
// memory); each epoch visits the lines in a seeded shuffle, turns them into examples, and packs them into rows of
// at most max_length tokens, documents kept apart by position ids that restart at 0. The position in the data is
// two numbers (epoch, line cursor), so a resumed run continues exactly where it stopped.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/data/example.h"
#include "moetune/data/line_mapping.h"
#include "moetune/data/mixing.h"

namespace moetune::data {

struct LineRef {
  uint32_t file;
  uint64_t offset;
  int64_t line_number;  // 1-based, for error messages
};

// The non-blank lines of `files`. `validation_fraction` > 0 splits them by a seeded hash of their place:
// returns {train, validation}.
struct SplitLines {
  std::vector<LineRef> train, validation;
};
SplitLines index_lines(const std::vector<std::filesystem::path>& files, double validation_fraction, uint64_t seed);

struct LoaderOptions {
  Format format = Format::Auto;
  bool loss_on_prompt = false;
  int64_t max_length = 512;
  bool packing = true;
  bool shuffle = true;
  bool skip_bad_lines = false;
  int64_t micro_batch_size = 4;
  uint64_t seed = 1234;
  LineMapping mapping;  // data.columns / data.roles, applied to each line before its shape is read
  Mixing mixing;        // data.train_weights; empty: each line once per epoch
};

struct MicroBatch {
  Tensor input_ids, labels, position_ids, attention_mask;  // [B, L] I64; labels -100 where not scored
  int64_t tokens = 0;   // real (non-padding) tokens
  int64_t scored = 0;   // tokens the loss counts (after the shift)
};

struct DataPosition {
  int64_t epoch = 0;
  int64_t cursor = 0;  // the next line of this epoch's order to read
};

class DataLoader {
 public:
  DataLoader(std::vector<std::filesystem::path> files, std::vector<LineRef> lines, TextCodec codec, LoaderOptions options);

  // The next micro-batch, continuing into the next epoch at the end of one. `single_pass` loaders (validation)
  // return an empty batch (no rows) at the end of the first epoch instead. A micro-batch that would take more
  // lines than the data holds (micro_batch_size or max_length far above the data's size) is an Error: it would
  // wrap epoch after epoch without end.
  MicroBatch next(bool single_pass = false);

  const DataPosition& position() const { return position_; }
  void restore(const DataPosition& position, int64_t skipped_lines = 0) {
    position_ = position;
    skipped_ = skipped_lines;
  }
  double epochs_done() const;          // fractional
  int64_t skipped_lines() const { return skipped_; }
  int64_t size() const { return int64_t(lines_.size()); }
  std::string file_names() const;  // for messages: "a.jsonl, b.jsonl"

 private:
  std::vector<size_t> order(int64_t epoch) const;
  // The example of line `index` of the current order; nullopt when it is bad and bad lines are skipped.
  std::optional<Example> read(size_t line_index);

  std::vector<std::filesystem::path> files_;
  std::vector<std::unique_ptr<std::ifstream>> streams_;
  std::vector<LineRef> lines_;
  TextCodec codec_;
  LoaderOptions options_;
  DataPosition position_;
  std::vector<size_t> order_;
  int64_t order_epoch_ = -1;
  int64_t skipped_ = 0;
  int64_t skipped_in_a_row_ = 0;  // a whole epoch of bad lines would otherwise loop forever
};

}  // namespace moetune::data
