#include "moetune/model/cuda/all_to_all_dispatcher.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"

namespace moetune::model::cuda {
namespace {

Tensor device_rows(int64_t rows, int64_t columns, DType dtype) {
  return Tensor::empty({rows, columns}, dtype, Device::cuda());
}

}  // namespace

AllToAllDispatcher::AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group, bool overlap)
    : num_experts_(num_experts), group_(std::move(group)), overlap_(overlap) {
  MOETUNE_CHECK(num_experts_ % group_->size() == 0, "{} experts do not split over {} expert-parallel ranks", num_experts_,
                group_->size());
  int low = 0, high = 0;
  gpu::check(cudaDeviceGetStreamPriorityRange(&low, &high), "stream priorities");
  gpu::check(cudaStreamCreateWithPriority(&transfer_stream_, cudaStreamNonBlocking, high), "the all-to-all stream");
  gpu::check(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "an event");
  gpu::check(cudaEventCreateWithFlags(&transferred_, cudaEventDisableTiming), "an event");
}

AllToAllDispatcher::~AllToAllDispatcher() {
  if (transfer_stream_) cudaStreamSynchronize(transfer_stream_);
  if (queued_) cudaEventDestroy(queued_);
  if (transferred_) cudaEventDestroy(transferred_);
  if (transfer_stream_) cudaStreamDestroy(transfer_stream_);
}

Tensor AllToAllDispatcher::send_out(const Tensor& token_rows) const {
  Tensor sent = device_rows(sends_.rows(), token_rows.size(1), token_rows.dtype());
  ops::cuda::gather_rows(token_rows, sends_.token_of_row, sent);
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
  const int64_t top_k = expert_ids.size(1), ranks = group_->size();
  // The one wait of the layer: the router's counts per rank come back to size the exchange.
  PhaseScope phase("ep.plan");
  sends_ = ops::cuda::plan_token_sends(expert_ids, num_experts_, ranks);
  receipts_ = receipts_from(group_->all_to_all(exchange_counts(sends_.tokens_to, sends_.choices_to)), ranks);
  // The choices travel as the receiver numbers its experts; the extra expert `local` takes the others.
  const int64_t local = sends_.local_experts;
  Tensor received_choices = device_rows(receipts_.tokens, top_k, DType::I32);
  group_->all_to_all_rows(sends_.local_choice, sends_.tokens_to, received_choices, receipts_.tokens_from);
  sends_.local_choice = Tensor();  // (freed in stream order: after the transfer has read it)
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
  ops::cuda::sum_rows(send_back(partial), sends_.row_to_rank, out, residual);
}

void AllToAllDispatcher::combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor&,
                                          const Tensor& dexpert_out, const Tensor& dweights) {
  const Tensor received_dout = send_out(dout);
  Tensor received_dweights = device_rows(receipts_.tokens, sends_.top_k, DType::F32);
  ops::cuda::combine_experts_backward(received_dout, expert_out, received_plan_, received_weights_, dexpert_out,
                                      received_dweights);
  // Each choice's gradient comes from the one rank that holds its expert; the others send 0 for it.
  ops::cuda::sum_rows(send_back(received_dweights), sends_.row_to_rank, dweights);
}

void AllToAllDispatcher::dispatch_backward(const Tensor& drows, const Tensor& dx) {
  begin_dispatch_backward(drows);
  end_dispatch_backward(dx);
}

void AllToAllDispatcher::begin_dispatch_backward(const Tensor& drows) {
  received_dx_ = device_rows(receipts_.tokens, drows.size(1), drows.dtype());
  ops::cuda::permute_tokens_backward(drows, received_plan_, received_dx_);
  // Allocated on the current stream, which frees them only after waiting for the transfer (end_dispatch_backward).
  returned_dx_ = device_rows(sends_.rows(), drows.size(1), drows.dtype());
  gpu::check(cudaEventRecord(queued_, gpu::stream()), "recording the expert rows' gradient");
  gpu::check(cudaStreamWaitEvent(transfer_stream_, queued_), "ordering the all-to-all after it");
  const gpu::StreamScope on(transfer_stream_);
  const PhaseScope phase("ep.all_to_all (beside weight gradients)");
  group_->all_to_all_rows(received_dx_, receipts_.tokens_from, returned_dx_, sends_.tokens_to);
  gpu::check(cudaEventRecord(transferred_, transfer_stream_), "recording the all-to-all");
}

void AllToAllDispatcher::end_dispatch_backward(const Tensor& dx) {
  gpu::check(cudaStreamWaitEvent(gpu::stream(), transferred_), "waiting for the all-to-all");
  ops::cuda::sum_rows(returned_dx_, sends_.row_to_rank, dx);
  received_dx_ = returned_dx_ = Tensor();
}

size_t AllToAllDispatcher::stash_bytes() const {
  return held_bytes({&sends_.token_of_row, &sends_.row_to_rank, &received_plan_.offsets, &received_plan_.row_of,
                     &received_plan_.source, &received_weights_});
}

void AllToAllDispatcher::clear() {
  sends_ = {};
  receipts_ = {};
  received_weights_ = received_dx_ = returned_dx_ = Tensor();
  received_plan_ = {};
}

}  // namespace moetune::model::cuda
