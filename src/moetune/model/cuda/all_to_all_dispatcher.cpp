#include "moetune/model/cuda/all_to_all_dispatcher.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"

namespace moetune::model::cuda {
namespace {

Tensor device_rows(int64_t rows, int64_t columns, DType dtype) {
  return Tensor::empty({rows, columns}, dtype, Device::cuda());
}

Tensor device_index(const std::vector<int32_t>& index, Shape shape) {
  return Tensor::from_vector(index, std::move(shape)).to(Device::cuda());
}

}  // namespace

AllToAllDispatcher::AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group)
    : num_experts_(num_experts), group_(std::move(group)) {
  MOETUNE_CHECK(num_experts_ % group_->size() == 0, "{} experts do not split over {} expert-parallel ranks", num_experts_,
                group_->size());
}

Tensor AllToAllDispatcher::send_out(const Tensor& token_rows) const {
  Tensor sent = device_rows(sends_.rows(), token_rows.size(1), token_rows.dtype());
  ops::cuda::gather_rows(token_rows, token_of_row_, sent);
  Tensor received = device_rows(receipts_.tokens, token_rows.size(1), token_rows.dtype());
  const PhaseScope phase("ep.all_to_all");
  group_->all_to_all_rows(sent, sends_.tokens_to, received, receipts_.tokens_from);
  return received;
}

Tensor AllToAllDispatcher::send_back(const Tensor& received_rows) const {
  Tensor back = device_rows(sends_.rows(), received_rows.size(1), received_rows.dtype());
  const PhaseScope phase("ep.all_to_all");
  group_->all_to_all_rows(received_rows, receipts_.tokens_from, back, sends_.tokens_to);
  return back;
}

DispatchedTokens AllToAllDispatcher::dispatch(const Tensor& x, const Tensor& expert_ids) {
  const int64_t tokens = expert_ids.size(0), top_k = expert_ids.size(1), ranks = group_->size();
  PhaseScope phase("ep.plan");  // the host's wait for the router, its plan, and the counts' exchange
  const Tensor ids = expert_ids.to(Device::cpu());  // waits: the exchange is sized on the host
  sends_ = plan_token_sends(ids.data<int32_t>(), tokens, top_k, num_experts_, ranks);
  receipts_ = receipts_from(group_->all_to_all(exchange_counts(sends_)), ranks);
  token_of_row_ = device_index(sends_.token_of_row, {sends_.rows()});
  row_to_rank_ = device_index(sends_.row_to_rank, {tokens, ranks});
  // The choices travel as the receiver numbers its experts; the extra expert `local` takes the others.
  const int64_t local = sends_.local_experts;
  Tensor received_choices = device_rows(receipts_.tokens, top_k, DType::I32);
  group_->all_to_all_rows(device_index(sends_.local_choice, {sends_.rows(), top_k}), sends_.tokens_to, received_choices,
                          receipts_.tokens_from);
  received_plan_ = ops::cuda::plan_permutation(received_choices, local + 1);
  received_plan_.kept_rows = receipts_.choices;
  phase.next("ep.dispatch_rows");
  const Tensor received = send_out(x);
  Tensor rows = device_rows(receipts_.choices, x.size(1), x.dtype());
  ops::cuda::permute_tokens(received, received_plan_, rows);
  return {rows, received_plan_.offsets.flat_slice(0, {local + 1})};
}

void AllToAllDispatcher::combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) {
  received_weights_ = send_out(weights);
  Tensor partial = device_rows(receipts_.tokens, expert_out.size(1), expert_out.dtype());
  ops::cuda::combine_experts(expert_out, received_plan_, received_weights_, partial);
  ops::cuda::sum_rows(send_back(partial), row_to_rank_, out, residual);
}

void AllToAllDispatcher::combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor&,
                                          const Tensor& dexpert_out, const Tensor& dweights) {
  const Tensor received_dout = send_out(dout);
  Tensor received_dweights = device_rows(receipts_.tokens, sends_.top_k, DType::F32);
  ops::cuda::combine_experts_backward(received_dout, expert_out, received_plan_, received_weights_, dexpert_out,
                                      received_dweights);
  // Each choice's gradient comes from the one rank that holds its expert; the others send 0 for it.
  ops::cuda::sum_rows(send_back(received_dweights), row_to_rank_, dweights);
}

void AllToAllDispatcher::dispatch_backward(const Tensor& drows, const Tensor& dx) {
  Tensor received_dx = device_rows(receipts_.tokens, drows.size(1), drows.dtype());
  ops::cuda::permute_tokens_backward(drows, received_plan_, received_dx);
  ops::cuda::sum_rows(send_back(received_dx), row_to_rank_, dx);
}

size_t AllToAllDispatcher::stash_bytes() const {
  return held_bytes({&token_of_row_, &row_to_rank_, &received_plan_.offsets, &received_plan_.row_of,
                     &received_plan_.source, &received_weights_});
}

void AllToAllDispatcher::clear() {
  sends_ = {};
  receipts_ = {};
  token_of_row_ = row_to_rank_ = received_weights_ = Tensor();
  received_plan_ = {};
}

}  // namespace moetune::model::cuda
