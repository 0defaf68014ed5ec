#include "moetune/model/token_exchange.h"

#include <cstdint>

#include "moetune/core/error.h"

namespace moetune::model {

TokenSends plan_token_sends(const int32_t* expert_ids, int64_t tokens, int64_t top_k, int64_t experts, int64_t ranks) {
  MOETUNE_CHECK(ranks >= 1 && experts % ranks == 0 && top_k >= 1 && tokens >= 0,
                "token exchange: {} experts over {} ranks, top-{}, {} tokens", experts, ranks, top_k, tokens);
  TokenSends s;
  s.ranks = ranks;
  s.local_experts = experts / ranks;
  s.top_k = top_k;
  s.tokens_to.assign(size_t(ranks), 0);
  s.choices_to.assign(size_t(ranks), 0);
  // Pass 1: which ranks each token goes to (as a per-rank row count), so the rows can be laid out by rank.
  std::vector<uint8_t> goes(size_t(tokens * ranks), 0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = expert_ids[t * top_k + j];
      MOETUNE_CHECK(e >= 0 && e < experts, "token exchange: token {} chose expert {} of {}", t, e, experts);
      const int64_t r = e / s.local_experts;
      ++s.choices_to[size_t(r)];
      uint8_t& flag = goes[size_t(t * ranks + r)];
      if (!flag) ++s.tokens_to[size_t(r)];
      flag = 1;
    }
  std::vector<int64_t> next(size_t(ranks), 0);  // the next free row of each destination's block
  int64_t total = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    next[size_t(r)] = total;
    total += s.tokens_to[size_t(r)];
  }
  MOETUNE_CHECK(total < INT32_MAX, "token exchange: {} rows exceed the 32-bit row indices", total);
  s.token_of_row.resize(size_t(total));
  s.local_choice.assign(size_t(total * top_k), int32_t(s.local_experts));
  s.row_to_rank.assign(size_t(tokens * ranks), int32_t(total));
  // Pass 2: rank by rank, in token order (every rank sees its senders' rows in token order: deterministic).
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < ranks; ++r) {
      if (!goes[size_t(t * ranks + r)]) continue;
      const int64_t row = next[size_t(r)]++;
      s.token_of_row[size_t(row)] = int32_t(t);
      s.row_to_rank[size_t(t * ranks + r)] = int32_t(row);
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = expert_ids[t * top_k + j];
        if (e / s.local_experts == r) s.local_choice[size_t(row * top_k + j)] = int32_t(e % s.local_experts);
      }
    }
  return s;
}

std::vector<int64_t> exchange_counts(const TokenSends& sends) {
  std::vector<int64_t> counts;
  counts.reserve(size_t(2 * sends.ranks));
  for (int64_t r = 0; r < sends.ranks; ++r) {
    counts.push_back(sends.tokens_to[size_t(r)]);
    counts.push_back(sends.choices_to[size_t(r)]);
  }
  return counts;
}

TokenReceipts receipts_from(const std::vector<int64_t>& arrived, int64_t ranks) {
  MOETUNE_CHECK(int64_t(arrived.size()) == 2 * ranks, "token exchange: {} counts arrived from {} ranks", arrived.size(),
                ranks);
  TokenReceipts r;
  for (int64_t s = 0; s < ranks; ++s) {
    r.tokens_from.push_back(arrived[size_t(2 * s)]);
    r.tokens += arrived[size_t(2 * s)];
    r.choices += arrived[size_t(2 * s + 1)];
  }
  return r;
}

}  // namespace moetune::model
