#include "moetune/ops/cuda/aux_loss.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/aux_loss_kernels.h"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

void expect_logits(const Tensor& logits, std::string_view op) {
  check_gpu_tensor(op, "logits", logits);
  MOETUNE_CHECK(logits.dtype() == DType::F32 && logits.dim() == 2, "{}: logits must be F32 [T, E], got {}", op,
                logits.str());
  MOETUNE_CHECK(logits.size(1) >= 1 && logits.size(1) <= kRouterMaxExperts,
                "{}: {} experts (logits {}); the GPU router takes 1 to {}", op, logits.size(1), logits.str(),
                kRouterMaxExperts);
}

void expect_token_valid(const Tensor& token_valid, int64_t tokens, std::string_view op) {
  if (token_valid.defined()) check_gpu_tensor(op, "token_valid", token_valid, DType::U8, {tokens});
}

}  // namespace

void aux_loss_accumulate(const Tensor& logits, const Tensor& expert_ids, const Tensor& token_valid,
                         const Tensor& counts, const Tensor& prob_sums) {
  constexpr std::string_view op = "aux_loss_accumulate";
  expect_logits(logits, op);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  check_gpu_tensor(op, "expert_ids", expert_ids);
  MOETUNE_CHECK(expert_ids.dim() == 2 && expert_ids.size(0) == tokens, "{}: expert_ids must be I32 [{}, k], got {}",
                op, tokens, expert_ids.str());
  const int64_t top_k = expert_ids.size(1);
  MOETUNE_CHECK(top_k >= 1 && top_k <= experts && top_k <= kRouterMaxTopK, "{}: top-{} of {} experts", op, top_k,
                experts);
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {tokens, top_k});
  expect_token_valid(token_valid, tokens, op);
  check_gpu_tensor(op, "counts", counts, DType::F32, {experts});
  check_gpu_tensor(op, "prob_sums", prob_sums, DType::F32, {experts});
  gpu::check(launch_aux_loss_accumulate(device_data<float>(logits), device_data<int32_t>(expert_ids),
                                        device_data<uint8_t>(token_valid), tokens, int(experts), int(top_k),
                                        device_data<float>(counts), device_data<float>(prob_sums), gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

void aux_loss_value(const Tensor& counts, const Tensor& prob_sums, double rows, const Tensor& loss) {
  constexpr std::string_view op = "aux_loss_value";
  check_gpu_tensor(op, "counts", counts);
  MOETUNE_CHECK(counts.dtype() == DType::F32 && counts.dim() == 1 && counts.size(0) >= 1,
                "{}: counts must be F32 [E], got {}", op, counts.str());
  const int64_t experts = counts.size(0);
  check_gpu_tensor(op, "prob_sums", prob_sums, DType::F32, {experts});
  check_gpu_tensor(op, "loss", loss, DType::F32, {1});
  MOETUNE_CHECK(rows >= 0, "{}: {} counted rows", op, rows);
  gpu::check(launch_aux_loss_value(device_data<float>(counts), device_data<float>(prob_sums), int(experts), rows,
                                   device_data<float>(loss), gpu::stream()),
             fmt::format("{} over {} experts", op, experts));
}

void aux_loss_backward(const Tensor& logits, const Tensor& token_valid, const Tensor& counts, double rows,
                       double scale, const Tensor& dlogits) {
  constexpr std::string_view op = "aux_loss_backward";
  expect_logits(logits, op);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  expect_token_valid(token_valid, tokens, op);
  check_gpu_tensor(op, "counts", counts, DType::F32, {experts});
  check_gpu_tensor(op, "dlogits", dlogits, DType::F32, {tokens, experts});
  MOETUNE_CHECK(rows >= 0, "{}: {} counted rows", op, rows);
  gpu::check(launch_aux_loss_backward(device_data<float>(logits), device_data<uint8_t>(token_valid),
                                      device_data<float>(counts), tokens, int(experts), rows, scale,
                                      device_data<float>(dlogits), gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

}  // namespace moetune::ops::cuda
