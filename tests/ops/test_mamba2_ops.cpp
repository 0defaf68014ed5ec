// The CPU ops Nemotron-H brought: the Mamba2 conv + SiLU, the selective scan and the gated RMSNorm (every input's
// and parameter's gradient by finite differences, with document restarts inside the rows and dt clamped for
// some tokens), a packed row equal to its documents run one by one, and relu².
#include <gtest/gtest.h>

#include "gradcheck_util.h"
#include "moetune/ops/mamba2.h"
#include "moetune/ops/relu_squared.h"

namespace moetune::ops {
namespace {

// Two documents in 7 rows: 0..2 and 3..6.
const DocumentStarts kTwoDocuments{1, 0, 0, 1, 0, 0, 0};

TEST(GradCheck, Mamba2ConvWithSilu) {
  Tensor xbc = random({7, 5}), weight = random({5, 3}, 0.5f), bias = random({5}, 0.5f);
  const Tensor w = random({7, 5});
  Tensor dweight = Tensor::zeros({5, 3}, DType::F32), dbias = Tensor::zeros({5}, DType::F32);
  const Tensor dxbc =
      mamba2_conv_backward(w, xbc, weight, bias, kTwoDocuments, dweight, dbias);
  auto loss = [&] { return weighted_sum(mamba2_conv_forward(xbc, weight, bias, kTwoDocuments), w); };
  expect_gradient("dxbc", xbc, loss, dxbc);
  expect_gradient("dweight", weight, loss, dweight);
  expect_gradient("dbias", bias, loss, dbias);
}

// 4 heads of 3 in 2 groups, state 5; dt_min chosen so that a few tokens' dt is clamped (zero gradient there).
TEST(GradCheck, Mamba2Scan) {
  const Mamba2Scan scan{4, 3, 2, 5, 0.3, INFINITY};
  Mamba2ScanInputs in{random({7, 12}), random({7, 4}), random({7, 10}), random({7, 10})};
  Mamba2ScanParams params{random({4}, 0.5f), random({4}, 0.5f), random({4})};
  const Tensor w = random({7, 12});
  Mamba2ScanParams dparams{Tensor::zeros({4}, DType::F32), Tensor::zeros({4}, DType::F32), Tensor::zeros({4}, DType::F32)};
  const Mamba2ScanInputs grad = mamba2_scan_backward(w, in, params, scan, kTwoDocuments, dparams);
  int clamped = 0;
  for (int64_t i = 0; i < 28; ++i) clamped += grad.dt.data<float>()[i] == 0.0f;
  EXPECT_GT(clamped, 0) << "no dt hit dt_min: the clamp's gradient goes unchecked";
  auto loss = [&] { return weighted_sum(mamba2_scan_forward(in, params, scan, kTwoDocuments), w); };
  expect_gradient("dx", in.x, loss, grad.x);
  expect_gradient("ddt", in.dt, loss, grad.dt);
  expect_gradient("dB", in.b, loss, grad.b);
  expect_gradient("dC", in.c, loss, grad.c);
  expect_gradient("ddt_bias", params.dt_bias, loss, dparams.dt_bias);
  expect_gradient("dA_log", params.a_log, loss, dparams.a_log);
  expect_gradient("dD", params.d, loss, dparams.d);
}

TEST(GradCheck, GatedRmsNorm) {
  Tensor x = random({3, 8}), z = random({3, 8}), weight = random({8});
  const Tensor w = random({3, 8});
  Tensor dweight = Tensor::zeros({8}, DType::F32);
  const GatedRmsNormGrads grads = gated_rms_norm_backward(w, x, z, weight, 4, 1e-5, dweight);
  auto loss = [&] { return weighted_sum(gated_rms_norm_forward(x, z, weight, 4, 1e-5), w); };
  expect_gradient("dx", x, loss, grads.dx);
  expect_gradient("dz", z, loss, grads.dz);
  expect_gradient("dweight", weight, loss, dweight);
}

TEST(GradCheck, ReluSquared) {
  Tensor x = random({4, 6});
  const Tensor w = random({4, 6});
  expect_gradient("dx", x, [&] { return weighted_sum(relu_squared_forward(x), w); }, relu_squared_backward(w, x));
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(first, count).clone(); }

// A packed row computes what its documents compute alone: neither the conv window nor the state crosses the start.
TEST(Mamba2, PackedDocumentsEqualTheDocumentsAlone) {
  const Mamba2Scan scan{2, 2, 1, 3, 0.0, INFINITY};
  const Tensor xbc = random({7, 6}), weight = random({6, 4}), bias = random({6});
  const Tensor packed_conv = mamba2_conv_forward(xbc, weight, bias, kTwoDocuments);
  const Mamba2ScanInputs in{random({7, 4}), random({7, 2}), random({7, 3}), random({7, 3})};
  const Mamba2ScanParams params{random({2}), random({2}), random({2})};
  const Tensor packed = mamba2_scan_forward(in, params, scan, kTwoDocuments);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}}) {
    const DocumentStarts alone(size_t(count), 0);
    DocumentStarts one = alone;
    one[0] = 1;
    const Tensor conv = mamba2_conv_forward(rows_of(xbc, first, count), weight, bias, one);
    EXPECT_TRUE(conv.same_bytes(rows_of(packed_conv, first, count))) << "conv, document at " << first;
    const Mamba2ScanInputs part{rows_of(in.x, first, count), rows_of(in.dt, first, count), rows_of(in.b, first, count),
                                rows_of(in.c, first, count)};
    const Tensor y = mamba2_scan_forward(part, params, scan, one);
    EXPECT_TRUE(y.same_bytes(rows_of(packed, first, count))) << "scan, document at " << first;
  }
}

// Generation's cache: the scan over rows 0..6 of one document fed in pieces (3, 1, 3), each continuing from the
// state the one before left, gives the whole pass's bits, and the state ends as the last row's.
TEST(Mamba2, ScanContinuesFromItsState) {
  const Mamba2Scan scan{2, 2, 1, 3, 0.0, INFINITY};
  const Mamba2ScanInputs in{random({7, 4}), random({7, 2}), random({7, 3}), random({7, 3})};
  const Mamba2ScanParams params{random({2}), random({2}), random({2})};
  DocumentStarts one(7, 0);
  one[0] = 1;
  const Tensor whole = mamba2_scan_forward(in, params, scan, one);
  const Tensor state = Tensor::zeros({2, 2, 3}, DType::F32);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 3}, {3, 1}, {4, 3}}) {
    const Mamba2ScanInputs part{rows_of(in.x, first, count), rows_of(in.dt, first, count), rows_of(in.b, first, count),
                                rows_of(in.c, first, count)};
    const Tensor y = mamba2_scan_forward(part, params, scan, DocumentStarts(size_t(count), 0), state);
    EXPECT_TRUE(y.same_bytes(rows_of(whole, first, count))) << "rows from " << first;
  }
  // A further row from the final state equals the whole pass over eight rows' last.
  const Mamba2ScanInputs more{random({8, 4}), random({8, 2}), random({8, 3}), random({8, 3})};
  Mamba2ScanInputs eight = more;
  for (auto [t, from] :
       {std::pair<Tensor*, const Tensor*>{&eight.x, &in.x}, {&eight.dt, &in.dt}, {&eight.b, &in.b}, {&eight.c, &in.c}})
    std::copy_n(from->data<float>(), from->numel(), t->data<float>());
  DocumentStarts eight_one(8, 0);
  eight_one[0] = 1;
  const Tensor y8 = mamba2_scan_forward(eight, params, scan, eight_one);
  const Mamba2ScanInputs last{rows_of(eight.x, 7, 1), rows_of(eight.dt, 7, 1), rows_of(eight.b, 7, 1),
                              rows_of(eight.c, 7, 1)};
  EXPECT_TRUE(mamba2_scan_forward(last, params, scan, DocumentStarts(1, 0), state).same_bytes(rows_of(y8, 7, 1)));
}

}  // namespace
}  // namespace moetune::ops
