// Launchers of expert parallelism's exchange plan on the GPU (model/token_exchange.h has the scheme and the host
// reference): raw device pointers in, a CUDA status out; ops/cuda/exchange_plan.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// Device scratch bytes for `tokens` tokens over `ranks` ranks.
cudaError_t exchange_plan_workspace_bytes(int64_t tokens, int64_t ranks, size_t* bytes);

// expert_ids [tokens, top_k] (expert e on rank e / local_experts) ->
//   counts      I64 [2 · ranks]: (tokens sent to rank r, their choices of r's experts), r by r;
//   token_of_row I32 [tokens · ranks]: its first S entries (S = the rows sent) the token of each sent row,
//               grouped by destination, token order within one;
//   local_choice I32 [tokens · ranks, top_k]: first S rows, each choice as the destination numbers its experts,
//               or local_experts where the choice's expert lives elsewhere;
//   row_to_rank  I32 [tokens, ranks]: token t's row to rank r, or S.
// Exactly model::plan_token_sends's values. Ids must be in [0, local_experts · ranks) (not checked: the host
// would have to wait).
cudaError_t launch_exchange_plan(const int32_t* expert_ids, int64_t tokens, int top_k, int local_experts, int ranks,
                                 void* workspace, size_t workspace_bytes, int64_t* counts, int32_t* token_of_row,
                                 int32_t* local_choice, int32_t* row_to_rank, cudaStream_t stream);

}  // namespace moetune::ops::cuda
