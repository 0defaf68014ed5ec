// The host plan of expert parallelism's token exchange (model/token_exchange.h): each token once to each rank
// holding one of its experts, rows grouped by destination in token order, choices renumbered as the destination
// numbers its experts, and the counts the ranks exchange.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/model/token_exchange.h"

namespace moetune::model {
namespace {

TEST(TokenExchange, EachTokenGoesOnceToEachRankOfItsExperts) {
  // 8 experts over 2 ranks (0-3 on rank 0, 4-7 on rank 1), top-2, 4 tokens.
  const std::vector<int32_t> ids = {0, 5,   // both ranks
                                    1, 2,   // rank 0 only, twice
                                    7, 4,   // rank 1 only, twice
                                    6, 3};  // both ranks
  const TokenSends s = plan_token_sends(ids.data(), 4, 2, 8, 2);
  EXPECT_EQ(s.local_experts, 4);
  EXPECT_EQ(s.tokens_to, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(s.choices_to, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(s.token_of_row, (std::vector<int32_t>{0, 1, 3, 0, 2, 3}));
  // Rank 0's rows, then rank 1's; 4 (= local experts) marks a choice of the other rank.
  EXPECT_EQ(s.local_choice, (std::vector<int32_t>{0, 4, 1, 2, 4, 3, 4, 1, 3, 0, 2, 4}));
  // Token t's row to rank r, or 6 (= rows) where it sends none.
  EXPECT_EQ(s.row_to_rank, (std::vector<int32_t>{0, 3, 1, 6, 6, 4, 2, 5}));
  EXPECT_EQ(exchange_counts(s.tokens_to, s.choices_to), (std::vector<int64_t>{3, 4, 3, 4}));
}

TEST(TokenExchange, ReceiptsAddUpWhatArrives) {
  const TokenReceipts r = receipts_from({5, 9, 0, 0, 2, 3}, 3);
  EXPECT_EQ(r.tokens_from, (std::vector<int64_t>{5, 0, 2}));
  EXPECT_EQ(r.tokens, 7);
  EXPECT_EQ(r.choices, 12);
}

TEST(TokenExchange, OneRankKeepsEveryChoice) {
  const std::vector<int32_t> ids = {2, 0, 1, 2};
  const TokenSends s = plan_token_sends(ids.data(), 2, 2, 3, 1);
  EXPECT_EQ(s.tokens_to, (std::vector<int64_t>{2}));
  EXPECT_EQ(s.local_choice, ids);
  EXPECT_EQ(s.row_to_rank, (std::vector<int32_t>{0, 1}));
}

TEST(TokenExchange, BadIdsAndLayoutsAreErrors) {
  const std::vector<int32_t> ids = {0, 9};
  EXPECT_THROW(plan_token_sends(ids.data(), 1, 2, 8, 2), Error);
  EXPECT_THROW(plan_token_sends(ids.data(), 1, 2, 9, 2), Error);  // 9 experts over 2 ranks
  EXPECT_THROW(receipts_from({1, 2, 3}, 2), Error);
}

}  // namespace
}  // namespace moetune::model
