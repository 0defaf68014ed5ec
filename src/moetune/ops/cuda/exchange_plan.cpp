#include "moetune/ops/cuda/exchange_plan.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/exchange_plan_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {

DeviceTokenSends plan_token_sends(const Tensor& expert_ids, int64_t experts, int64_t ranks) {
  constexpr std::string_view op = "plan_token_sends";
  check_gpu_tensor(op, "expert_ids", expert_ids);
  MOETUNE_CHECK(expert_ids.dtype() == DType::I32 && expert_ids.dim() == 2 && expert_ids.size(1) >= 1,
                "{}: expert_ids must be I32 [T, k], got {}", op, expert_ids.str());
  MOETUNE_CHECK(ranks >= 1 && experts >= ranks && experts % ranks == 0, "{}: {} experts over {} ranks", op, experts, ranks);
  const int64_t tokens = expert_ids.size(0), top_k = expert_ids.size(1);
  DeviceTokenSends s;
  s.ranks = ranks;
  s.local_experts = experts / ranks;
  s.top_k = top_k;
  // Sized for the most a token can send (one row to each rank); the first S rows are the plan's.
  const Device gpu = Device::cuda();
  Tensor token_of_row = Tensor::empty({tokens * ranks}, DType::I32, gpu);
  Tensor local_choice = Tensor::empty({tokens * ranks, top_k}, DType::I32, gpu);
  s.row_to_rank = Tensor::empty({tokens, ranks}, DType::I32, gpu);
  Tensor counts = Tensor::empty({2 * ranks}, DType::I64, gpu);
  size_t workspace_bytes = 0;
  gpu::check(exchange_plan_workspace_bytes(tokens, ranks, &workspace_bytes), fmt::format("{} of {}", op, expert_ids.str()));
  const Tensor workspace = Tensor::empty({int64_t(std::max<size_t>(workspace_bytes, 1))}, DType::U8, gpu);
  gpu::check(launch_exchange_plan(device_data<int32_t>(expert_ids), tokens, int(top_k), int(s.local_experts), int(ranks),
                                  workspace.raw_data(), workspace_bytes, device_data<int64_t>(counts),
                                  device_data<int32_t>(token_of_row), device_data<int32_t>(local_choice),
                                  device_data<int32_t>(s.row_to_rank), gpu::stream()),
             fmt::format("{} of {} over {} ranks", op, expert_ids.str(), ranks));
  const Tensor host = counts.to(Device::cpu());  // waits
  int64_t rows = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    s.tokens_to.push_back(host.data<int64_t>()[2 * r]);
    s.choices_to.push_back(host.data<int64_t>()[2 * r + 1]);
    rows += s.tokens_to.back();
  }
  s.token_of_row = token_of_row.narrow(0, rows);
  s.local_choice = local_choice.narrow(0, rows);
  return s;
}

}  // namespace moetune::ops::cuda
