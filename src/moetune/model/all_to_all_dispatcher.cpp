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
  permutation_ = ops::plan_permutation(routing, num_experts_);
  std::vector<int64_t> counts(static_cast<size_t>(num_experts_));
  for (size_t e = 0; e < counts.size(); ++e) counts[e] = permutation_.offsets[e + 1] - permutation_.offsets[e];
  plan_ = plan_all_to_all(counts, group_->all_to_all(counts), group_->size());
  return {send_to_experts(ops::permute_tokens(x, permutation_)), plan_.offsets};
}

Tensor AllToAllDispatcher::send_to_experts(const Tensor& rows) const {
  Tensor received = Tensor::empty({sum(plan_.recv_rows), rows.size(1)}, rows.dtype());
  group_->all_to_all_rows(rows, plan_.send_rows, received, plan_.recv_rows);
  return gather_rows(received, plan_.expert_major);
}

Tensor AllToAllDispatcher::send_to_tokens(const Tensor& rows) const {
  const Tensor source_major = scatter_rows(rows, plan_.expert_major);
  Tensor back = Tensor::empty({sum(plan_.send_rows), rows.size(1)}, rows.dtype());
  group_->all_to_all_rows(source_major, plan_.recv_rows, back, plan_.send_rows);
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
  return (permutation_.source.size() + permutation_.row_of.size() + plan_.expert_major.size()) * sizeof(int64_t) +
         (returned_.defined() ? returned_.nbytes() : 0);
}

void AllToAllDispatcher::clear() {
  permutation_ = {};
  plan_ = {};
  returned_ = Tensor();
}

}  // namespace moetune::model
