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
  // This runs once per MoE layer while the GPU waits (tokens · k choices, 65,536 at 8,192 tokens): tables
  // instead of divisions, and each choice's rank looked up once.
  std::vector<int32_t> rank_of(static_cast<size_t>(experts)), local_of(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    rank_of[size_t(e)] = int32_t(e / s.local_experts);
    local_of[size_t(e)] = int32_t(e % s.local_experts);
  }
  const int64_t choices = tokens * top_k;
  std::vector<int32_t> choice_rank(static_cast<size_t>(choices));
  std::vector<int32_t> first_choice_to(size_t(tokens * ranks), -1);  // per (token, rank): its first choice there
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* first_choice = &first_choice_to[size_t(t * ranks)];
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t c = t * top_k + j;
      const int32_t e = expert_ids[c];
      if (e < 0 || e >= experts) fail("token exchange: token {} chose expert {} of {}", t, e, experts);
      const int32_t r = rank_of[size_t(e)];
      choice_rank[size_t(c)] = r;
      ++s.choices_to[size_t(r)];
      if (first_choice[r] < 0) {
        first_choice[r] = int32_t(c);
        ++s.tokens_to[size_t(r)];
      }
    }
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
  // Rank by rank, in token order (every rank sees its senders' rows in token order: deterministic).
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* rows = &s.row_to_rank[size_t(t * ranks)];
    for (int64_t r = 0; r < ranks; ++r) {
      if (first_choice_to[size_t(t * ranks + r)] < 0) continue;
      const int64_t row = next[size_t(r)]++;
      s.token_of_row[size_t(row)] = int32_t(t);
      rows[r] = int32_t(row);
    }
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t c = t * top_k + j;
      s.local_choice[size_t(rows[choice_rank[size_t(c)]]) * size_t(top_k) + size_t(j)] = local_of[size_t(expert_ids[c])];
    }
  }
  return s;
}

std::vector<int64_t> exchange_counts(const std::vector<int64_t>& tokens_to, const std::vector<int64_t>& choices_to) {
  MOETUNE_CHECK(tokens_to.size() == choices_to.size(), "token exchange: {} token counts, {} choice counts",
                tokens_to.size(), choices_to.size());
  std::vector<int64_t> counts;
  counts.reserve(2 * tokens_to.size());
  for (size_t r = 0; r < tokens_to.size(); ++r) {
    counts.push_back(tokens_to[r]);
    counts.push_back(choices_to[r]);
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
