#include "moetune/data/step_reader.h"

namespace moetune::data {

StepReader::StepReader(DataLoader& loader, int64_t micro_batches)
    : loader_(loader), micro_batches_(micro_batches), position_(loader.position()), skipped_lines_(loader.skipped_lines()) {}

StepReader::~StepReader() { wait(); }

StepReader::Step StepReader::read() {
  Step step;
  step.micro.reserve(size_t(micro_batches_));
  for (int64_t i = 0; i < micro_batches_; ++i) step.micro.push_back(loader_.next());
  step.position = loader_.position();
  step.skipped_lines = loader_.skipped_lines();
  return step;
}

std::vector<MicroBatch> StepReader::take() {
  Step step = ahead_.valid() ? ahead_.get() : read();
  position_ = step.position;
  skipped_lines_ = step.skipped_lines;
  return std::move(step.micro);
}

void StepReader::read_ahead() {
  if (!ahead_.valid()) ahead_ = std::async(std::launch::async, [this] { return read(); });
}

void StepReader::wait() {
  if (ahead_.valid()) ahead_.wait();
}

void StepReader::restore(const DataPosition& position, int64_t skipped_lines) {
  if (ahead_.valid()) {
    ahead_.wait();
    ahead_ = {};  // a read-ahead's error belongs to a position no longer read
  }
  loader_.restore(position, skipped_lines);
  position_ = position;
  skipped_lines_ = skipped_lines;
}

}  // namespace moetune::data
