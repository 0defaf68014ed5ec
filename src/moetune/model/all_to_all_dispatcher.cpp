#include "moetune/model/all_to_all_dispatcher.h"

#include <cstring>

#include "moetune/core/error.h"

namespace moetune::model {
namespace {

// out[j] = rows[index[j]] (rows of a [N, H] host tensor).
Tensor gather_rows(const Tensor& rows, const std::vector<int64_t>& index) {
  const int64_t width = rows.size(1);
  Tensor out = Tensor::empty({int64_t(index.size()), width}, rows.dtype());
  const size_t row_bytes = size_t(width) * dtype_size(rows.dtype());
  const char* from = static_cast<const char*>(rows.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t j = 0; j < index.size(); ++j) std::memcpy(to + j * row_bytes, from + size_t(index[j]) * row_bytes, row_bytes);
  return out;
}

// out[index[j]] = rows[j]: the inverse of gather_rows for a permutation.
Tensor scatter_rows(const Tensor& rows, const std::vector<int64_t>& index) {
  const int64_t width = rows.size(1);
  Tensor out = Tensor::empty({int64_t(index.size()), width}, rows.dtype());
  const size_t row_bytes = size_t(width) * dtype_size(rows.dtype());
  const char* from = static_cast<const char*>(rows.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t j = 0; j < index.size(); ++j) std::memcpy(to + size_t(index[j]) * row_bytes, from + j * row_bytes, row_bytes);
  return out;
}

int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (int64_t v : values) total += v;
  return total;
}

}  // namespace

AllToAllDispatcher::AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group)
    : num_experts_(num_experts), local_experts_(num_experts / group->size()), group_(std::move(group)) {
  MOETUNE_CHECK(num_experts_ % group_->size() == 0, "{} experts do not split over {} expert-parallel ranks", num_experts_,
                group_->size());
}

DispatchedTokens AllToAllDispatcher::dispatch(const Tensor& x, const ops::Routing& routing) {
  const size_t ranks = size_t(group_->size());
  permutation_ = ops::plan_permutation(routing, num_experts_);
  // How many of this rank's rows each expert gets, grouped by the rank that owns the expert.
  std::vector<int64_t> counts(static_cast<size_t>(num_experts_));
  for (size_t e = 0; e < counts.size(); ++e) counts[e] = permutation_.offsets[e + 1] - permutation_.offsets[e];
  const std::vector<int64_t> arriving = group_->all_to_all(counts);  // block s: source s's rows per local expert
  send_rows_.assign(ranks, 0);
  recv_rows_.assign(ranks, 0);
  for (size_t r = 0; r < ranks; ++r)
    for (size_t e = 0; e < size_t(local_experts_); ++e) {
      send_rows_[r] += counts[r * size_t(local_experts_) + e];
      recv_rows_[r] += arriving[r * size_t(local_experts_) + e];
    }
  // What arrives is source-major (each source's rows expert-major); the grouped GEMMs want expert-major.
  std::vector<int64_t> source_start(ranks + 1, 0);
  for (size_t s = 0; s < ranks; ++s) source_start[s + 1] = source_start[s] + recv_rows_[s];
  std::vector<int64_t> offsets(size_t(local_experts_) + 1, 0);
  expert_major_.clear();
  for (size_t e = 0; e < size_t(local_experts_); ++e) {
    for (size_t s = 0; s < ranks; ++s) {
      int64_t begin = source_start[s];
      for (size_t before = 0; before < e; ++before) begin += arriving[s * size_t(local_experts_) + before];
      for (int64_t row = 0; row < arriving[s * size_t(local_experts_) + e]; ++row) expert_major_.push_back(begin + row);
    }
    offsets[e + 1] = int64_t(expert_major_.size());
  }
  return {send_to_experts(ops::permute_tokens(x, permutation_)), std::move(offsets)};
}

Tensor AllToAllDispatcher::send_to_experts(const Tensor& rows) const {
  Tensor received = Tensor::empty({sum(recv_rows_), rows.size(1)}, rows.dtype());
  group_->all_to_all_rows(rows, send_rows_, received, recv_rows_);
  return gather_rows(received, expert_major_);
}

Tensor AllToAllDispatcher::send_to_tokens(const Tensor& rows) const {
  const Tensor source_major = scatter_rows(rows, expert_major_);
  Tensor back = Tensor::empty({sum(send_rows_), rows.size(1)}, rows.dtype());
  group_->all_to_all_rows(source_major, recv_rows_, back, send_rows_);
  return back;
}

Tensor AllToAllDispatcher::combine(const Tensor& expert_out, const ops::Routing& routing) {
  returned_ = send_to_tokens(expert_out);
  return ops::combine_experts(returned_, permutation_, routing);
}

ops::CombineGrads AllToAllDispatcher::combine_backward(const Tensor& dout, const Tensor&, const ops::Routing& routing) {
  ops::CombineGrads grads = ops::combine_experts_backward(dout, returned_, permutation_, routing);
  grads.dexpert_out = send_to_experts(grads.dexpert_out);
  return grads;
}

Tensor AllToAllDispatcher::dispatch_backward(const Tensor& drows, int64_t tokens) {
  return ops::permute_tokens_backward(send_to_tokens(drows), permutation_, tokens);
}

size_t AllToAllDispatcher::stash_bytes() const {
  return (permutation_.source.size() + permutation_.row_of.size() + expert_major_.size()) * sizeof(int64_t) +
         (returned_.defined() ? returned_.nbytes() : 0);
}

void AllToAllDispatcher::clear() {
  permutation_ = {};
  expert_major_.clear();
  returned_ = Tensor();
}

}  // namespace moetune::model
