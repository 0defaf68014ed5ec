// The micro-batches of one optimizer step, read ahead on a thread of their own while the GPU runs the step before.
// Reading a step means parsing its JSONL lines and building the rows on the host; done between two steps it is
// time the GPU waits with nothing queued (the optimizer step ends in a host read of the gradient norm, and the
// next forward pass cannot be queued before its batch exists). The loader is used by one thread at a time: the
// reader's thread while a read-ahead runs, the caller's otherwise.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "moetune/data/loader.h"

namespace moetune::data {

class StepReader {
 public:
  // `micro_batches`: how many loader.next() a step takes (every rank's micro-batches, in order).
  StepReader(DataLoader& loader, int64_t micro_batches);
  ~StepReader();

  // The next step's micro-batches: the one read ahead, or read now. Errors of a read-ahead (a bad line) are
  // thrown here, at the step that needs the line, as a read on the spot would throw them.
  std::vector<MicroBatch> take();
  // Starts reading the step after the one last taken on a thread; call when the caller will not use the loader
  // (or anything that shares its tokenizer) before the next take() or wait().
  void read_ahead();
  // Returns once no read-ahead runs (its result is kept for take()).
  void wait();
  // Drops what was read ahead and moves the loader (resuming from a checkpoint).
  void restore(const DataPosition& position, int64_t skipped_lines);

  // Where the data stands after the steps taken (not after a read-ahead): what a checkpoint records.
  const DataPosition& position() const { return position_; }
  int64_t skipped_lines() const { return skipped_lines_; }
  double epochs_done() const { return double(position_.epoch) + double(position_.cursor) / double(loader_.size()); }

 private:
  struct Step {
    std::vector<MicroBatch> micro;
    DataPosition position;  // the loader's after reading them
    int64_t skipped_lines = 0;
  };
  Step read();

  DataLoader& loader_;
  int64_t micro_batches_;
  std::future<Step> ahead_;
  DataPosition position_;
  int64_t skipped_lines_ = 0;
};

}  // namespace moetune::data
