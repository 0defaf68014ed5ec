// Expert parallelism's exchange plan made on the GPU (model/token_exchange.h has the scheme, and the host plan
// the GPU tests compare this with, value for value). The only wait is for the per-rank counts: NCCL's transfers
// are sized on the host.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

struct DeviceTokenSends {
  int64_t ranks = 0, local_experts = 0, top_k = 0;
  std::vector<int64_t> tokens_to, choices_to;  // host: per destination rank
  Tensor token_of_row;                         // I32 [S]
  Tensor local_choice;                         // I32 [S, k]
  Tensor row_to_rank;                          // I32 [T, ranks]: S where a token sends nothing to a rank
  int64_t rows() const { return token_of_row.defined() ? token_of_row.numel() : 0; }
};

// expert_ids I32 [T, k] on the GPU, ids in [0, experts) (not checked), expert e on rank e / (experts / ranks).
DeviceTokenSends plan_token_sends(const Tensor& expert_ids, int64_t experts, int64_t ranks);

}  // namespace moetune::ops::cuda
