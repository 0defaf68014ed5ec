// The CPU expert-parallel dispatcher (model/all_to_all_dispatcher.h) against the single-device one, under mpirun:
// each rank routes its own tokens over experts split across the world, and a stand-in for the experts (expert e
// scales its rows by 1 + e / 4) makes the whole pass checkable: the combined output, the routing weights'
// gradient, d(x), and each expert's d(scale), which sums d(rows) · rows over every rank's tokens it received.
// LocalDispatcher, with every expert here and each rank's tokens alone, is the reference (fp32, so equal up to
// the order of the sums).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "moetune/model/all_to_all_dispatcher.h"
#include "mpi_world.h"

namespace moetune {
namespace {

constexpr int64_t kHidden = 6, kTopK = 3;

double expert_scale(int64_t expert) { return 1.0 + 0.25 * double(expert); }

Tensor random_rows(int64_t rows, int64_t width, std::mt19937_64& random) {
  std::normal_distribution<float> normal;
  std::vector<float> values(size_t(rows * width));
  for (float& v : values) v = normal(random);
  return Tensor::from_vector(values, {rows, width});
}

// Each token picks kTopK distinct experts from `pool`, with weights in (0.1, 1).
ops::Routing random_routing(int64_t tokens, std::vector<int32_t> pool, std::mt19937_64& random) {
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  ops::Routing routing;
  routing.top_k = kTopK;
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), random);
    for (int64_t j = 0; j < kTopK; ++j) {
      routing.expert.push_back(pool[size_t(j)]);
      routing.weight.push_back(weight(random));
    }
  }
  return routing;
}

struct Pass {
  Tensor out, dx;
  std::vector<float> dweight;
  std::vector<double> dscale;  // [all experts], summed over the world
};

// Forward and backward through `dispatcher` with the stand-in experts; its experts start at `first_expert`.
Pass run_pass(model::TokenDispatcher& dispatcher, const Tensor& x, const ops::Routing& routing, const Tensor& dout,
              int64_t first_expert, int64_t num_experts) {
  const model::DispatchedTokens in = dispatcher.dispatch(x, routing);
  const int64_t rows = in.rows.size(0);
  EXPECT_EQ(in.offsets.back(), rows);
  std::vector<float> row_scale(static_cast<size_t>(rows));
  for (size_t e = 0; e + 1 < in.offsets.size(); ++e)
    for (int64_t r = in.offsets[e]; r < in.offsets[e + 1]; ++r) row_scale[size_t(r)] = float(expert_scale(first_expert + int64_t(e)));
  Tensor expert_out = Tensor::empty({rows, kHidden}, DType::F32);
  for (int64_t i = 0; i < rows * kHidden; ++i)
    expert_out.data<float>()[i] = row_scale[size_t(i / kHidden)] * in.rows.data<float>()[i];
  Pass pass;
  pass.out = dispatcher.combine(expert_out, routing);
  const ops::CombineGrads grads = dispatcher.combine_backward(dout, expert_out, routing);
  pass.dweight = grads.dweight;
  pass.dscale.assign(size_t(num_experts), 0.0);
  Tensor drows = Tensor::empty({rows, kHidden}, DType::F32);
  for (size_t e = 0; e + 1 < in.offsets.size(); ++e)
    for (int64_t i = in.offsets[e] * kHidden; i < in.offsets[e + 1] * kHidden; ++i) {
      const float dy = grads.dexpert_out.data<float>()[i];
      drows.data<float>()[i] = row_scale[size_t(i / kHidden)] * dy;
      pass.dscale[size_t(first_expert) + e] += double(dy) * in.rows.data<float>()[i];
    }
  pass.dx = dispatcher.dispatch_backward(drows, x.size(0));
  pass.dscale = g_world->all_reduce_sum(pass.dscale);
  EXPECT_GT(dispatcher.stash_bytes(), 0u);
  dispatcher.clear();
  return pass;
}

double relative_difference(const float* a, const float* b, int64_t n) {
  double difference = 0, norm = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    difference += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(difference / norm);
}

// Every rank's tokens (a different number on each) choose from `pool`; the world holds 2 experts per rank.
void check_matches_local(const std::vector<int32_t>& pool) {
  const int64_t ranks = g_world->size(), rank = g_world->rank(), experts = 2 * ranks, tokens = 5 + 3 * rank;
  std::mt19937_64 random(uint64_t(77 + rank));
  const Tensor x = random_rows(tokens, kHidden, random), dout = random_rows(tokens, kHidden, random);
  const ops::Routing routing = random_routing(tokens, pool, random);

  model::LocalDispatcher local(experts);
  const Pass expected = run_pass(local, x, routing, dout, 0, experts);
  // The reference's d(scale) is summed over the world: each rank ran all experts on its own tokens only.
  model::AllToAllDispatcher exchange(experts, g_world);
  const Pass got = run_pass(exchange, x, routing, dout, rank * (experts / ranks), experts);

  EXPECT_LT(relative_difference(got.out.data<float>(), expected.out.data<float>(), tokens * kHidden), 1e-6);
  EXPECT_LT(relative_difference(got.dx.data<float>(), expected.dx.data<float>(), tokens * kHidden), 1e-6);
  ASSERT_EQ(got.dweight.size(), expected.dweight.size());
  EXPECT_LT(relative_difference(got.dweight.data(), expected.dweight.data(), int64_t(got.dweight.size())), 1e-6);
  for (int64_t e = 0; e < experts; ++e)
    EXPECT_NEAR(got.dscale[size_t(e)], expected.dscale[size_t(e)], 1e-5 * (1 + std::abs(expected.dscale[size_t(e)])))
        << "expert " << e;
}

TEST(AllToAllDispatcherMpi, MatchesLocalDispatcher) {
  std::vector<int32_t> every(size_t(2 * g_world->size()));
  std::iota(every.begin(), every.end(), 0);
  check_matches_local(every);
}

TEST(AllToAllDispatcherMpi, RanksThatReceiveNothing) {
  // Only the first two ranks' experts are chosen: the others receive no tokens but still take part.
  check_matches_local({0, 1, 2, 3});
}

}  // namespace
}  // namespace moetune
