// cuDNN flash attention against the CPU fp32 reference (ops/attention.h) on fp32 copies of the same bf16 inputs:
// the output, the softmax statistics and every gradient, for one document, packed documents of uneven lengths
// (1-token documents, lengths that are not multiples of any tile), grouped-query and multi-head attention,
// head_dim 64 and 128, a loose length bound, graph reuse across layouts, and no tokens at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cuda/attention.h"

namespace moetune {
namespace {

using testing::document_starts;
using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

struct Case {
  std::vector<int64_t> lengths;  // documents laid end to end
  int64_t heads = 8, kv_heads = 2, head_dim = 128;
  int64_t max_document_length = 0;  // 0: the longest document
};

// Natural-log logsumexp of each query's scaled scores over the keys it sees, in double: what cuDNN's statistics
// hold. q [T, heads, d], k [T, kv_heads, d] in f32; returns F32 [T, heads].
Tensor reference_logsumexp(const Tensor& q, const Tensor& k, const std::vector<int64_t>& starts, double scale) {
  const int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2), kv_heads = k.size(1);
  Tensor lse = Tensor::empty({tokens, heads}, DType::F32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* q_row = q.data<float>() + (t * heads + h) * d;
      std::vector<double> scores;
      for (int64_t j = starts[size_t(t)]; j <= t; ++j) {
        const float* k_row = k.data<float>() + (j * kv_heads + h / (heads / kv_heads)) * d;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double(q_row[i]) * k_row[i];
        scores.push_back(dot * scale);
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double total = 0;
      for (double s : scores) total += std::exp(s - top);
      lse.data<float>()[t * heads + h] = float(top + std::log(total));
    }
  return lse;
}

class AttentionGpu : public testing::GpuTest {
 protected:
  void check(const Case& c) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", heads " << c.heads << ", kv_heads " << c.kv_heads
                                      << ", head_dim " << c.head_dim << ", " << c.lengths.size() << " documents");
    const std::vector<int64_t> starts = document_starts(c.lengths);
    const int64_t tokens = int64_t(starts.size()), d = c.head_dim;
    const int64_t longest = c.lengths.empty() ? 0 : *std::max_element(c.lengths.begin(), c.lengths.end());
    const double scale = 1.0 / std::sqrt(double(d));
    const Device gpu = Device::cuda();
    const Tensor q = random_normal({tokens, c.heads, d}, DType::BF16, gpu, rng());
    const Tensor k = random_normal({tokens, c.kv_heads, d}, DType::BF16, gpu, rng());
    const Tensor v = random_normal({tokens, c.kv_heads, d}, DType::BF16, gpu, rng());
    const Tensor dout = random_normal({tokens, c.heads, d}, DType::BF16, gpu, rng());

    const ops::AttentionMask mask{.document_start = starts};
    const Tensor qf = to_cpu_f32(q), kf = to_cpu_f32(k), vf = to_cpu_f32(v), doutf = to_cpu_f32(dout);
    const Tensor expected_out = ops::causal_attention_forward(qf, kf, vf, mask, scale);
    const ops::AttentionGrads expected = ops::causal_attention_backward(doutf, qf, kf, vf, expected_out, mask, scale);

    const ops::cuda::PackedDocuments docs =
        ops::cuda::pack_documents(starts, c.max_document_length ? c.max_document_length : longest);
    EXPECT_EQ(docs.num_documents, int64_t(c.lengths.size()));
    const Tensor out = poisoned({tokens, c.heads, d}, DType::BF16, gpu);
    const Tensor stats = ops::cuda::causal_attention_forward(q, k, v, docs, scale, out);
    const Tensor dq = poisoned(q.shape(), DType::BF16, gpu);
    const Tensor dk = poisoned(k.shape(), DType::BF16, gpu);
    const Tensor dv = poisoned(v.shape(), DType::BF16, gpu);
    ops::cuda::causal_attention_backward(dout, q, k, v, out, stats, docs, scale, dq, dk, dv);

    ASSERT_EQ(stats.shape(), (Shape{tokens, c.heads}));
    EXPECT_LT(relative_error(out, expected_out), kBf16Tolerance);
    // The statistics come from exact (bf16-valued) inputs with fp32 arithmetic: far tighter than a bf16 output
    // (1e-3 leaves room for a kernel that sums the probabilities after rounding them to bf16).
    EXPECT_LT(relative_error(stats, reference_logsumexp(qf, kf, starts, scale)), 1e-3);
    EXPECT_LT(relative_error(dq, expected.dq), kBf16Tolerance);
    EXPECT_LT(relative_error(dk, expected.dk), kBf16Tolerance);
    EXPECT_LT(relative_error(dv, expected.dv), kBf16Tolerance);
  }
};

TEST_F(AttentionGpu, OneDocument) {
  check({.lengths = {300}, .heads = 8, .kv_heads = 2, .head_dim = 128});
  check({.lengths = {77}, .heads = 4, .kv_heads = 4, .head_dim = 64});
}

TEST_F(AttentionGpu, PackedDocumentsOfUnevenLengths) {
  for (int64_t head_dim : {64, 128}) {
    check({.lengths = {1, 17, 64, 5}, .heads = 8, .kv_heads = 2, .head_dim = head_dim});
    check({.lengths = {1, 17, 64, 5}, .heads = 4, .kv_heads = 4, .head_dim = head_dim});
  }
}

TEST_F(AttentionGpu, ManyShortDocumentsWithSingleTokenOnes) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 21; ++i) lengths.push_back(i % 3 == 0 ? 1 : 3 * i + 2);  // 21 documents: padded to 32
  check({.lengths = lengths, .heads = 8, .kv_heads = 2, .head_dim = 64});
}

// The bound is the padded row length, not the longest document: the same graphs then serve batches of other
// layouts, which must each come out right.
TEST_F(AttentionGpu, LooseBoundAndGraphReuseAcrossLayouts) {
  check({.lengths = {33, 7, 90}, .heads = 8, .kv_heads = 2, .head_dim = 128, .max_document_length = 128});
  check({.lengths = {100, 28, 2}, .heads = 8, .kv_heads = 2, .head_dim = 128, .max_document_length = 128});
  check({.lengths = {128, 128}, .heads = 8, .kv_heads = 2, .head_dim = 128, .max_document_length = 128});
  check({.lengths = {50, 1, 60, 9}, .heads = 8, .kv_heads = 2, .head_dim = 128, .max_document_length = 128});
}

TEST_F(AttentionGpu, NoTokens) {
  const Device gpu = Device::cuda();
  const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents({}, 128);
  EXPECT_EQ(docs.num_documents, 0);
  const Tensor q = Tensor::empty({0, 8, 64}, DType::BF16, gpu), kv = Tensor::empty({0, 2, 64}, DType::BF16, gpu);
  const Tensor out = Tensor::empty({0, 8, 64}, DType::BF16, gpu);
  const Tensor stats = ops::cuda::causal_attention_forward(q, kv, kv, docs, 0.125, out);
  EXPECT_EQ(stats.shape(), (Shape{0, 8}));
  const Tensor dq = Tensor::empty(q.shape(), DType::BF16, gpu), dk = Tensor::empty(kv.shape(), DType::BF16, gpu),
               dv = Tensor::empty(kv.shape(), DType::BF16, gpu);
  ops::cuda::causal_attention_backward(out, q, kv, kv, out, stats, docs, 0.125, dq, dk, dv);
}

TEST_F(AttentionGpu, RejectsWhatCudnnCannotDo) {
  const Device gpu = Device::cuda();
  const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(document_starts({16}), 16);
  // head_dim not a multiple of 8
  const Tensor q = Tensor::empty({16, 4, 36}, DType::BF16, gpu), k = Tensor::empty({16, 2, 36}, DType::BF16, gpu);
  EXPECT_THROW(ops::cuda::causal_attention_forward(q, k, k, docs, 1.0, q), Error);
  // heads not a multiple of kv_heads
  const Tensor q3 = Tensor::empty({16, 3, 64}, DType::BF16, gpu), k2 = Tensor::empty({16, 2, 64}, DType::BF16, gpu);
  EXPECT_THROW(ops::cuda::causal_attention_forward(q3, k2, k2, docs, 1.0, q3), Error);
  // documents that do not cover the tokens
  const Tensor q8 = Tensor::empty({8, 4, 64}, DType::BF16, gpu), k8 = Tensor::empty({8, 2, 64}, DType::BF16, gpu);
  EXPECT_THROW(ops::cuda::causal_attention_forward(q8, k8, k8, docs, 1.0, q8), Error);
  // f32 inputs
  const Tensor q32 = Tensor::empty({16, 4, 64}, DType::F32, gpu), k32 = Tensor::empty({16, 2, 64}, DType::F32, gpu);
  EXPECT_THROW(ops::cuda::causal_attention_forward(q32, k32, k32, docs, 1.0, q32), Error);
  // a document longer than the bound, and starts that do not describe consecutive documents
  EXPECT_THROW(ops::cuda::pack_documents(document_starts({10, 20}), 16), Error);
  EXPECT_THROW(ops::cuda::pack_documents({0, 0, 1, 0}, 16), Error);
  EXPECT_THROW(ops::cuda::pack_documents({1, 1}, 16), Error);
}

}  // namespace
}  // namespace moetune
