#include "moetune/model/all_to_all_dispatcher.h"

#include <cstring>

#include "moetune/core/error.h"

namespace moetune::model {
namespace {

// out[j] = rows[index[j]] (rows of a [N, C] host tensor, any dtype).
Tensor gather_rows(const Tensor& rows, const std::vector<int32_t>& index) {
  const int64_t width = rows.size(1);
  Tensor out = Tensor::empty({int64_t(index.size()), width}, rows.dtype());
  const size_t row_bytes = size_t(width) * dtype_size(rows.dtype());
  const char* from = static_cast<const char*>(rows.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t j = 0; j < index.size(); ++j) std::memcpy(to + j * row_bytes, from + size_t(index[j]) * row_bytes, row_bytes);
  return out;
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  return {t.data<T>(), t.data<T>() + t.numel()};
}

}  // namespace

AllToAllDispatcher::AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group)
    : num_experts_(num_experts), group_(std::move(group)) {
  MOETUNE_CHECK(num_experts_ % group_->size() == 0, "{} experts do not split over {} expert-parallel ranks", num_experts_,
                group_->size());
}

Tensor AllToAllDispatcher::send_out(const Tensor& token_rows) const {
  Tensor received = Tensor::empty({receipts_.tokens, token_rows.size(1)}, token_rows.dtype());
  group_->all_to_all_rows(gather_rows(token_rows, sends_.token_of_row), sends_.tokens_to, received, receipts_.tokens_from);
  return received;
}

Tensor AllToAllDispatcher::send_back(const Tensor& received_rows) const {
  Tensor back = Tensor::empty({sends_.rows(), received_rows.size(1)}, received_rows.dtype());
  group_->all_to_all_rows(received_rows, receipts_.tokens_from, back, sends_.tokens_to);
  return back;
}

Tensor AllToAllDispatcher::sum_over_ranks(const Tensor& returned) const {
  const int64_t ranks = sends_.ranks, tokens = int64_t(sends_.row_to_rank.size()) / ranks, width = returned.size(1);
  Tensor out = Tensor::zeros({tokens, width}, DType::F32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t row = sends_.row_to_rank[size_t(t * ranks + r)];
      if (row == sends_.rows()) continue;  // token t sent nothing to rank r
      const float* from = returned.data<float>() + row * width;
      float* to = out.data<float>() + t * width;
      for (int64_t c = 0; c < width; ++c) to[c] += from[c];
    }
  return out;
}

Tensor AllToAllDispatcher::with_rows_for_every_choice(const Tensor& kept_rows) const {
  MOETUNE_CHECK(kept_rows.size(0) == receipts_.choices, "all-to-all dispatcher: {} expert rows for {} received choices",
                kept_rows.size(0), receipts_.choices);
  Tensor all = Tensor::zeros({int64_t(received_plan_.source.size()), kept_rows.size(1)}, kept_rows.dtype());
  if (kept_rows.numel() > 0) std::memcpy(all.raw_data(), kept_rows.raw_data(), kept_rows.nbytes());
  return all;
}

ops::Routing AllToAllDispatcher::receive_routing(const ops::Routing& routing) const {
  const int64_t k = routing.top_k, tokens = int64_t(routing.expert.size()) / k;
  Tensor choices = Tensor::empty({receipts_.tokens, k}, DType::I32);
  group_->all_to_all_rows(Tensor::from_vector(sends_.local_choice, {sends_.rows(), k}), sends_.tokens_to, choices,
                          receipts_.tokens_from);
  ops::Routing received;
  received.top_k = k;
  received.normalized = routing.normalized;
  received.expert = values_of<int32_t>(choices);
  received.weight = values_of<float>(send_out(Tensor::from_vector(routing.weight, {tokens, k})));
  for (size_t i = 0; i < received.expert.size(); ++i)
    if (received.expert[i] == sends_.local_experts) received.weight[i] = 0.0f;
  return received;
}

DispatchedTokens AllToAllDispatcher::dispatch(const Tensor& x, const ops::Routing& routing) {
  const int64_t ranks = group_->size();
  MOETUNE_CHECK(int64_t(routing.expert.size()) == x.size(0) * routing.top_k,
                "all-to-all dispatcher: {} choices for {} tokens at top-{}", routing.expert.size(), x.size(0), routing.top_k);
  sends_ = plan_token_sends(routing.expert.data(), x.size(0), routing.top_k, num_experts_, ranks);
  receipts_ = receipts_from(group_->all_to_all(exchange_counts(sends_.tokens_to, sends_.choices_to)), ranks);
  received_ = receive_routing(routing);
  const int64_t local = sends_.local_experts;
  received_plan_ = ops::plan_permutation(received_, local + 1);
  const std::vector<int64_t>& offsets = received_plan_.offsets;
  MOETUNE_CHECK(offsets[size_t(local)] == receipts_.choices,
                "all-to-all dispatcher: {} choices arrived for this rank's experts, the senders counted {}",
                offsets[size_t(local)], receipts_.choices);
  // The extra expert's rows sort last: this rank's rows are the first `choices`.
  const Tensor rows = ops::permute_tokens(send_out(x), received_plan_).narrow(0, receipts_.choices).clone();
  return {rows, std::vector<int64_t>(offsets.begin(), offsets.begin() + local + 1)};
}

Tensor AllToAllDispatcher::combine(const Tensor& expert_out, const ops::Routing&) {
  return sum_over_ranks(send_back(ops::combine_experts(with_rows_for_every_choice(expert_out), received_plan_, received_)));
}

ops::CombineGrads AllToAllDispatcher::combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing&) {
  const ops::CombineGrads received =
      ops::combine_experts_backward(send_out(dout), with_rows_for_every_choice(expert_out), received_plan_, received_);
  // Each choice's weight gradient comes from the one rank that holds its expert; the others send 0 for it.
  const Tensor dweight = sum_over_ranks(send_back(Tensor::from_vector(received.dweight, {receipts_.tokens, received_.top_k})));
  return {received.dexpert_out.narrow(0, receipts_.choices).clone(), values_of<float>(dweight)};
}

Tensor AllToAllDispatcher::dispatch_backward(const Tensor& drows, int64_t tokens) {
  const Tensor received_dx = ops::permute_tokens_backward(with_rows_for_every_choice(drows), received_plan_, receipts_.tokens);
  Tensor dx = sum_over_ranks(send_back(received_dx));
  MOETUNE_CHECK(dx.size(0) == tokens, "all-to-all dispatcher: d(x) came back for {} tokens, {} were dispatched", dx.size(0), tokens);
  return dx;
}

size_t AllToAllDispatcher::stash_bytes() const {
  return (sends_.token_of_row.size() + sends_.local_choice.size() + sends_.row_to_rank.size() + received_.expert.size()) *
             sizeof(int32_t) +
         received_.weight.size() * sizeof(float) +
         (received_plan_.offsets.size() + received_plan_.source.size() + received_plan_.row_of.size()) * sizeof(int64_t);
}

void AllToAllDispatcher::clear() {
  sends_ = {};
  receipts_ = {};
  received_ = {};
  received_plan_ = {};
}

}  // namespace moetune::model
