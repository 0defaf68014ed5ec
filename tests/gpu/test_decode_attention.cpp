// The split-K decode attention kernel (ops/cuda/decode_attention.h) against the CPU fp32 reference
// (ops/attention.h's causal attention with keys before the queries) on fp32 copies of the same bf16 inputs: one
// new token against 1 key, against keys over several splits (not a multiple of the split), a few new tokens at
// once, GQA and MHA, head_dim 8 (the tiny fixtures), 64, 128 and 256, the keys read from the front of a larger
// preallocated buffer as the KV cache holds them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cuda/decode_attention.h"

namespace moetune {
namespace {

struct Case {
  int64_t queries = 1, keys = 1, heads = 8, kv_heads = 2, head_dim = 128;
};

class DecodeAttentionGpu : public testing::GpuTest {
 protected:
  void check(const Case& c) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", " << c.queries << " queries, " << c.keys << " keys, heads "
                                      << c.heads << "/" << c.kv_heads << ", head_dim " << c.head_dim);
    const Device gpu = Device::cuda();
    const int64_t capacity = c.keys + 37;  // the cache is larger than the sequence so far
    const Tensor q = testing::random_normal({c.queries, c.heads, c.head_dim}, DType::BF16, gpu, rng());
    const Tensor k_cache = testing::random_normal({capacity, c.kv_heads, c.head_dim}, DType::BF16, gpu, rng());
    const Tensor v_cache = testing::random_normal({capacity, c.kv_heads, c.head_dim}, DType::BF16, gpu, rng());
    const Tensor k = k_cache.narrow(0, c.keys), v = v_cache.narrow(0, c.keys);
    const double scale = 1.0 / std::sqrt(double(c.head_dim));
    const Tensor out = testing::poisoned({c.queries, c.heads, c.head_dim}, DType::BF16, gpu);
    ops::cuda::decode_attention_forward(q, k, v, scale, out);

    const ops::AttentionMask all_visible{.document_start = std::vector<int64_t>(size_t(c.keys), 0)};
    const Tensor expected = ops::causal_attention_forward(testing::to_cpu_f32(q), testing::to_cpu_f32(k),
                                                          testing::to_cpu_f32(v), all_visible, scale);
    EXPECT_LT(testing::relative_error(testing::to_cpu_f32(out), expected), testing::kBf16Tolerance);
  }
};

TEST_F(DecodeAttentionGpu, OneNewTokenAgainstTheCache) {
  check({.queries = 1, .keys = 1});
  check({.queries = 1, .keys = 2});
  check({.queries = 1, .keys = 129});        // two splits, the second of one key
  check({.queries = 1, .keys = 1000});       // eight splits
  check({.queries = 1, .keys = 4100, .heads = 32, .kv_heads = 4});  // Qwen3-30B-A3B's attention
}

TEST_F(DecodeAttentionGpu, SeveralNewTokensSeeTheirOwnPrefix) {
  check({.queries = 2, .keys = 2});
  check({.queries = 3, .keys = 300});
  check({.queries = 130, .keys = 400});  // a later chunk whose queries span splits
}

TEST_F(DecodeAttentionGpu, HeadLayouts) {
  check({.queries = 1, .keys = 50, .heads = 4, .kv_heads = 4, .head_dim = 64});  // multi-head
  check({.queries = 2, .keys = 70, .heads = 4, .kv_heads = 1, .head_dim = 8});   // the tiny fixtures' shape
  check({.queries = 1, .keys = 200, .heads = 2, .kv_heads = 1, .head_dim = 256});
  check({.queries = 1, .keys = 33, .heads = 6, .kv_heads = 3, .head_dim = 40});   // not a multiple of 32
}

TEST_F(DecodeAttentionGpu, RefusesWhatItCannotRun) {
  const Device gpu = Device::cuda();
  const Tensor q = testing::random_normal({2, 4, 64}, DType::BF16, gpu, rng());
  const Tensor k = testing::random_normal({1, 2, 64}, DType::BF16, gpu, rng());  // fewer keys than new tokens
  const Tensor out = testing::poisoned({2, 4, 64}, DType::BF16, gpu);
  EXPECT_THROW(ops::cuda::decode_attention_forward(q, k, k, 0.125, out), Error);
  const Tensor wide = testing::random_normal({1, 1, 512}, DType::BF16, gpu, rng());
  EXPECT_THROW(ops::cuda::decode_attention_forward(wide, wide, wide, 0.125, testing::poisoned({1, 1, 512}, DType::BF16, gpu)), Error);
}

}  // namespace
}  // namespace moetune
