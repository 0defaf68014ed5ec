// Expert parallelism's token exchange, planned on the host: each token goes once to each rank that holds any
// of its chosen experts (as DeepEP's dispatch does), not once per choice. With top-8 of 128 experts over 2
// ranks that sends 2 rows per token instead of 8; over 8 ranks about 5.3. The receiving rank gets the token's
// choices numbered by its own experts, runs them, and sends back one row per token: the weighted sum of its
// experts' outputs, which the source adds up over the ranks. The backward pass is the mirror. Both expert-parallel
// dispatchers use this plan: the CPU one (model/all_to_all_dispatcher.h, host loops, the fp32 reference) and the
// GPU one (model/cuda/all_to_all_dispatcher.h, NCCL).
#pragma once

#include <cstdint>
#include <vector>

namespace moetune::model {

struct TokenSends {
  int64_t ranks = 0, local_experts = 0, top_k = 0;
  std::vector<int64_t> tokens_to;   // [ranks]: rows (tokens) sent to each rank
  std::vector<int64_t> choices_to;  // [ranks]: how many of those rows' choices name that rank's experts
  // [S]: the token of each sent row; rows grouped by destination rank, in token order within a destination.
  std::vector<int32_t> token_of_row;
  // [S, k]: each choice of a sent row as its destination numbers its experts (0 .. local_experts - 1), or
  // local_experts where the choice's expert lives on another rank.
  std::vector<int32_t> local_choice;
  // [T, ranks]: the row token t sends to rank r, or S where it sends none (the "no row" of ops' sum_rows).
  std::vector<int32_t> row_to_rank;
  int64_t rows() const { return int64_t(token_of_row.size()); }
};

// expert_ids [T, k] (ids in [0, experts); expert e lives on rank e / (experts / ranks)) -> what to send.
TokenSends plan_token_sends(const int32_t* expert_ids, int64_t tokens, int64_t top_k, int64_t experts, int64_t ranks);

// The counts every rank sends each rank, as one all-to-all of [ranks · 2] values: block r = (tokens, choices) to r
// (from TokenSends or the GPU's ops::cuda::DeviceTokenSends alike).
std::vector<int64_t> exchange_counts(const std::vector<int64_t>& tokens_to, const std::vector<int64_t>& choices_to);

struct TokenReceipts {
  std::vector<int64_t> tokens_from;  // [ranks]: rows (tokens) received from each rank
  int64_t tokens = 0;                // their sum
  int64_t choices = 0;               // the choices among them that this rank's experts take: its expert rows
};
// The all-to-all of exchange_counts' values -> what arrives here.
TokenReceipts receipts_from(const std::vector<int64_t>& arrived, int64_t ranks);

}  // namespace moetune::model
