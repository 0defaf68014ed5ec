#include "moetune/model/cuda/all_to_all_dispatcher.h"

#include <numeric>

#include "moetune/model/block_util.h"

namespace moetune::model::cuda {
namespace {

Tensor device_rows(int64_t rows, int64_t hidden, DType dtype) { return Tensor::empty({rows, hidden}, dtype, Device::cuda()); }

Tensor device_index(const std::vector<int64_t>& index) {
  std::vector<int32_t> narrow(index.begin(), index.end());
  return Tensor::from_vector(narrow, {int64_t(narrow.size())}).to(Device::cuda());
}

int64_t sum(const std::vector<int64_t>& values) { return std::accumulate(values.begin(), values.end(), int64_t(0)); }

}  // namespace

AllToAllDispatcher::AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group)
    : num_experts_(num_experts), group_(std::move(group)) {
  MOETUNE_CHECK(num_experts_ % group_->size() == 0, "{} experts do not split over {} expert-parallel ranks", num_experts_,
                group_->size());
}

DispatchedTokens AllToAllDispatcher::dispatch(const Tensor& x, const Tensor& expert_ids) {
  permutation_ = ops::cuda::plan_permutation(expert_ids, num_experts_);
  const Tensor offsets = permutation_.offsets.to(Device::cpu());  // waits: the exchange is sized on the host
  std::vector<int64_t> counts(static_cast<size_t>(num_experts_));
  for (size_t e = 0; e < counts.size(); ++e) counts[e] = offsets.data<int32_t>()[e + 1] - offsets.data<int32_t>()[e];
  plan_ = plan_all_to_all(counts, group_->all_to_all(counts), group_->size());
  std::vector<int64_t> inverse(plan_.expert_major.size());
  for (size_t j = 0; j < inverse.size(); ++j) inverse[size_t(plan_.expert_major[j])] = int64_t(j);
  expert_major_ = device_index(plan_.expert_major);
  source_major_ = device_index(inverse);
  Tensor local = device_rows(expert_ids.numel(), x.size(1), x.dtype());
  ops::cuda::permute_tokens(x, permutation_, local);
  Tensor rows = device_rows(sum(plan_.recv_rows), x.size(1), x.dtype());
  send_to_experts(local, rows);
  std::vector<int32_t> local_offsets(plan_.offsets.begin(), plan_.offsets.end());
  return {rows, Tensor::from_vector(local_offsets, {int64_t(local_offsets.size())}).to(Device::cuda())};
}

void AllToAllDispatcher::send_to_experts(const Tensor& rows, const Tensor& out) const {
  Tensor received = device_rows(sum(plan_.recv_rows), rows.size(1), rows.dtype());
  group_->all_to_all_rows(rows, plan_.send_rows, received, plan_.recv_rows);
  ops::cuda::gather_rows(received, expert_major_, out);
}

Tensor AllToAllDispatcher::send_to_tokens(const Tensor& rows) const {
  Tensor source_major = device_rows(rows.size(0), rows.size(1), rows.dtype());
  ops::cuda::gather_rows(rows, source_major_, source_major);
  Tensor back = device_rows(sum(plan_.send_rows), rows.size(1), rows.dtype());
  group_->all_to_all_rows(source_major, plan_.recv_rows, back, plan_.send_rows);
  return back;
}

void AllToAllDispatcher::combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) {
  returned_ = send_to_tokens(expert_out);
  ops::cuda::combine_experts(returned_, permutation_, weights, out, residual);
}

void AllToAllDispatcher::combine_backward(const Tensor& dout, const Tensor&, const Tensor& weights, const Tensor& dexpert_out,
                                          const Tensor& dweights) {
  Tensor local = device_rows(returned_.size(0), returned_.size(1), returned_.dtype());
  ops::cuda::combine_experts_backward(dout, returned_, permutation_, weights, local, dweights);
  returned_ = Tensor();
  send_to_experts(local, dexpert_out);
}

void AllToAllDispatcher::dispatch_backward(const Tensor& drows, const Tensor& dx) {
  ops::cuda::permute_tokens_backward(send_to_tokens(drows), permutation_, dx);
}

size_t AllToAllDispatcher::stash_bytes() const {
  return held_bytes({&permutation_.offsets, &permutation_.row_of, &permutation_.source, &expert_major_, &source_major_, &returned_});
}

void AllToAllDispatcher::clear() {
  permutation_ = {};
  plan_ = {};
  expert_major_ = source_major_ = returned_ = Tensor();
}

}  // namespace moetune::model::cuda
