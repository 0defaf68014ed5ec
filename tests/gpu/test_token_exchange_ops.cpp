// The GPU ops expert parallelism's token exchange adds to the permutation (model/token_exchange.h): a plan with
// an extra expert for choices made on other ranks whose rows are never kept (permute, combine, their backward
// skip them), and sum_rows, which adds up what the ranks send back for each token. Checked against plain host
// loops over the same plan, in f32 (exact up to summation order).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/model/token_exchange.h"
#include "moetune/ops/cuda/exchange_plan.h"
#include "moetune/ops/cuda/permute.h"

namespace moetune {
namespace {

using testing::random_normal;
using testing::relative_error;

const Device kGpu = Device::cuda();
constexpr double kTolerance = 1e-6;  // f32, differing only in summation order

class TokenExchangeGpu : public testing::GpuTest {};

std::vector<int32_t> host_ints(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  return {host.data<int32_t>(), host.data<int32_t>() + host.numel()};
}

std::vector<float> host_floats(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  return {host.data<float>(), host.data<float>() + host.numel()};
}

Tensor host_tensor(const std::vector<float>& values, Shape shape) { return Tensor::from_vector(values, std::move(shape)); }

TEST_F(TokenExchangeGpu, KeptRowsSkipChoicesMadeElsewhere) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const int64_t tokens = 53, local = 4, top_k = 3, hidden = 40;
  // Ids in [0, local]: `local` is the extra expert of choices whose experts live on other ranks.
  std::vector<int32_t> ids(size_t(tokens * top_k));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(local));
  for (int32_t& id : ids) id = pick(rng());
  ops::cuda::DevicePermutation plan =
      ops::cuda::plan_permutation(Tensor::from_vector(ids, {tokens, top_k}).to(kGpu), local + 1);
  const std::vector<int32_t> offsets = host_ints(plan.offsets), row_of = host_ints(plan.row_of),
                             source = host_ints(plan.source);
  const int64_t kept = offsets[size_t(local)];
  plan.kept_rows = kept;
  int64_t ours = 0;
  for (int32_t id : ids) ours += id < local;
  ASSERT_EQ(kept, ours);

  const Tensor x = random_normal({tokens, hidden}, DType::F32, kGpu, rng());
  const Tensor expert_out = random_normal({kept, hidden}, DType::F32, kGpu, rng());
  const Tensor dout = random_normal({tokens, hidden}, DType::F32, kGpu, rng());
  const Tensor weights = random_normal({tokens, top_k}, DType::F32, kGpu, rng());
  const std::vector<float> hx = host_floats(x), hy = host_floats(expert_out), hd = host_floats(dout),
                           hw = host_floats(weights);

  Tensor rows = Tensor::empty({kept, hidden}, DType::F32, kGpu);
  ops::cuda::permute_tokens(x, plan, rows);
  std::vector<float> expected_rows(size_t(kept * hidden));
  for (int64_t r = 0; r < kept; ++r)
    for (int64_t h = 0; h < hidden; ++h) expected_rows[size_t(r * hidden + h)] = hx[size_t(source[size_t(r)] * hidden + h)];
  EXPECT_EQ(relative_error(rows, host_tensor(expected_rows, {kept, hidden})), 0.0);

  std::vector<float> combined(size_t(tokens * hidden), 0.0f), summed(size_t(tokens * hidden), 0.0f),
      dweights(size_t(tokens * top_k), 0.0f), dexpert(size_t(kept * hidden), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t choice = t * top_k + j, row = row_of[size_t(choice)];
      if (ids[size_t(choice)] == local) {
        EXPECT_GE(row, kept);
        continue;
      }
      for (int64_t h = 0; h < hidden; ++h) {
        const float y = hy[size_t(row * hidden + h)], d = hd[size_t(t * hidden + h)];
        combined[size_t(t * hidden + h)] += hw[size_t(choice)] * y;
        summed[size_t(t * hidden + h)] += y;
        dweights[size_t(choice)] += d * y;
        dexpert[size_t(row * hidden + h)] = hw[size_t(choice)] * d;
      }
    }
  Tensor out = Tensor::empty({tokens, hidden}, DType::F32, kGpu);
  ops::cuda::combine_experts(expert_out, plan, weights, out);
  EXPECT_LT(relative_error(out, host_tensor(combined, {tokens, hidden})), kTolerance);
  ops::cuda::permute_tokens_backward(expert_out, plan, out);
  EXPECT_LT(relative_error(out, host_tensor(summed, {tokens, hidden})), kTolerance);
  Tensor dexpert_out = Tensor::empty({kept, hidden}, DType::F32, kGpu);
  // Choices made elsewhere must come back 0, whatever was there.
  Tensor dw = Tensor::from_vector(std::vector<float>(size_t(tokens * top_k), 7.0f), {tokens, top_k}).to(kGpu);
  ops::cuda::combine_experts_backward(dout, expert_out, plan, weights, dexpert_out, dw);
  EXPECT_LT(relative_error(dw, host_tensor(dweights, {tokens, top_k})), kTolerance);
  EXPECT_EQ(relative_error(dexpert_out, host_tensor(dexpert, {kept, hidden})), 0.0);
}

TEST_F(TokenExchangeGpu, SumRowsAddsWhatEachRankSentBack) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const int64_t tokens = 29, ranks = 3, hidden = 24, rows = 50;
  std::vector<int32_t> index(size_t(tokens * ranks));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(rows));  // `rows` itself names no row
  for (int32_t& i : index) i = pick(rng());
  const Tensor sent_back = random_normal({rows, hidden}, DType::F32, kGpu, rng());
  const Tensor residual = random_normal({tokens, hidden}, DType::F32, kGpu, rng());
  const std::vector<float> hb = host_floats(sent_back), hr = host_floats(residual);
  std::vector<float> expected(hr);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < ranks; ++r) {
      const int32_t row = index[size_t(t * ranks + r)];
      if (row == rows) continue;
      for (int64_t h = 0; h < hidden; ++h) expected[size_t(t * hidden + h)] += hb[size_t(row * hidden + h)];
    }
  Tensor out = Tensor::empty({tokens, hidden}, DType::F32, kGpu);
  ops::cuda::sum_rows(sent_back, Tensor::from_vector(index, {tokens, ranks}).to(kGpu), out, residual);
  EXPECT_LT(relative_error(out, host_tensor(expected, {tokens, hidden})), kTolerance);
}

TEST_F(TokenExchangeGpu, DevicePlanEqualsTheHostPlan) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  struct Case {
    int64_t tokens, experts, top_k, ranks;
  };
  for (const Case& c : {Case{37, 16, 2, 2}, Case{1000, 128, 8, 2}, Case{1000, 128, 8, 8}, Case{513, 64, 6, 4},
                        Case{70, 8, 2, 1}, Case{0, 16, 2, 2}, Case{5, 16, 4, 16}}) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, top-" << c.top_k << " of " << c.experts << " over "
                                      << c.ranks << " ranks");
    // Distinct experts per token, as a router chooses them.
    std::vector<int32_t> ids(size_t(c.tokens * c.top_k));
    std::vector<int32_t> all(size_t(c.experts));
    for (int64_t e = 0; e < c.experts; ++e) all[size_t(e)] = int32_t(e);
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::shuffle(all.begin(), all.end(), rng());
      std::copy(all.begin(), all.begin() + c.top_k, ids.begin() + t * c.top_k);
    }
    const model::TokenSends host = model::plan_token_sends(ids.data(), c.tokens, c.top_k, c.experts, c.ranks);
    const ops::cuda::DeviceTokenSends device =
        ops::cuda::plan_token_sends(Tensor::from_vector(ids, {c.tokens, c.top_k}).to(kGpu), c.experts, c.ranks);
    EXPECT_EQ(device.tokens_to, host.tokens_to);
    EXPECT_EQ(device.choices_to, host.choices_to);
    EXPECT_EQ(model::exchange_counts(device.tokens_to, device.choices_to),
              model::exchange_counts(host.tokens_to, host.choices_to));
    EXPECT_EQ(host_ints(device.token_of_row), host.token_of_row);
    EXPECT_EQ(host_ints(device.local_choice), host.local_choice);
    EXPECT_EQ(host_ints(device.row_to_rank), host.row_to_rank);
  }
}

}  // namespace
}  // namespace moetune
