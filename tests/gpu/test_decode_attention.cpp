// The split-K decode attention kernel (ops/cuda/decode_attention.h) against the CPU fp32 reference
// (ops/attention.h's causal attention with keys before the queries, which matches transformers' masks and sinks) on
// fp32 copies of the same bf16 inputs: one new token against 1 key, against keys over several splits (not a
// multiple of the split), a few new tokens at once, GQA and MHA, head_dim 8 (the tiny fixtures), 64, 128 and 256,
// the keys read from the front of a larger preallocated buffer as the KV cache holds them; sliding windows
// smaller than, equal to and larger than the sequence (cutting through split boundaries) and sinks (F32 and BF16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cuda/decode_attention.h"

namespace moetune {
namespace {

enum class Sinks { None, F32, BF16 };

// An fp32 CPU [n, heads, w] tensor's heads zero-padded (or cut) to `width`: the CPU reference takes one width for q,
// k and v, and zero columns change neither a score nor a kept output column.
Tensor heads_to_width(const Tensor& t, int64_t width) {
  const int64_t rows = t.size(0) * t.size(1), w = t.size(2);
  Tensor out = Tensor::zeros({t.size(0), t.size(1), width}, DType::F32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < std::min(w, width); ++i) out.data<float>()[r * width + i] = t.data<float>()[r * w + i];
  return out;
}

struct Case {
  int64_t queries = 1, keys = 1, heads = 8, kv_heads = 2, head_dim = 128;
  int64_t v_head_dim = 0;  // 0: head_dim
  int64_t window = 0;      // 0: none
  Sinks sinks = Sinks::None;
};

class DecodeAttentionGpu : public testing::GpuTest {
 protected:
  void check(const Case& c) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", " << c.queries << " queries, " << c.keys
                                      << " keys, heads " << c.heads << "/" << c.kv_heads << ", head_dim " << c.head_dim
                                      << ", v " << c.v_head_dim << ", window " << c.window << ", sinks "
                                      << int(c.sinks));
    const Device gpu = Device::cuda();
    const int64_t dv = c.v_head_dim > 0 ? c.v_head_dim : c.head_dim;
    const int64_t capacity = c.keys + 37;  // the cache is larger than the sequence so far
    const Tensor q = testing::random_normal({c.queries, c.heads, c.head_dim}, DType::BF16, gpu, rng());
    const Tensor k_cache = testing::random_normal({capacity, c.kv_heads, c.head_dim}, DType::BF16, gpu, rng());
    const Tensor v_cache = testing::random_normal({capacity, c.kv_heads, dv}, DType::BF16, gpu, rng());
    const Tensor k = k_cache.narrow(0, c.keys), v = v_cache.narrow(0, c.keys);
    // Sink logits about as large as the scores, so that they take a visible share of each softmax.
    const Tensor sinks =
        c.sinks == Sinks::None
            ? Tensor()
            : testing::random_normal({c.heads}, c.sinks == Sinks::F32 ? DType::F32 : DType::BF16, gpu, rng(), 2.0f);
    const double scale = 1.0 / std::sqrt(double(c.head_dim));
    const Tensor out = testing::poisoned({c.queries, c.heads, dv}, DType::BF16, gpu);
    ops::cuda::decode_attention_forward(q, k, v, scale, out, c.window, sinks);

    const ops::AttentionMask all_visible{.document_start = std::vector<int64_t>(size_t(c.keys), 0)};
    ops::AttentionVariant variant;
    if (c.window > 0) variant.sliding_window = c.window;
    if (sinks.defined()) variant.sinks = testing::to_cpu_f32(sinks);
    const int64_t width = std::max(c.head_dim, dv);
    const auto widened = [&](const Tensor& t) { return heads_to_width(testing::to_cpu_f32(t), width); };
    const Tensor expected = heads_to_width(
        ops::causal_attention_forward(widened(q), widened(k), widened(v), all_visible, scale, variant), dv);
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

// Multi-head latent attention's cache: q/k heads wider than v's (DeepSeek-V3 and Moonlight: 192 and 128; the
// tiny fixture's), and the other way round.
TEST_F(DecodeAttentionGpu, KeysAndValuesOfDifferentWidths) {
  check({.queries = 1, .keys = 300, .heads = 16, .kv_heads = 16, .head_dim = 192, .v_head_dim = 128});
  check({.queries = 5, .keys = 140, .heads = 4, .kv_heads = 4, .head_dim = 24, .v_head_dim = 16});
  check({.queries = 1, .keys = 77, .heads = 2, .kv_heads = 2, .head_dim = 64, .v_head_dim = 256});
  check({.queries = 2, .keys = 500, .heads = 4, .kv_heads = 4, .head_dim = 192, .v_head_dim = 128, .window = 200});
}

// Latent MLA's cache (decode_latent_attention_forward): one row a key shared by every query head, its first
// value_width columns the value. DeepSeek-V3's 512 + 64 over a few splits (the wide kernel), and the tiny
// fixtures' 16 + 8 (the narrow one).
TEST_F(DecodeAttentionGpu, LatentRowsAreKeysAndValues) {
  struct Latent {
    int64_t queries, keys, heads, width, value_width;
  };
  for (const Latent c : {Latent{1, 300, 16, 576, 512}, Latent{3, 130, 4, 576, 512}, Latent{2, 40, 4, 24, 16}}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", " << c.queries << " queries, " << c.keys << " keys, "
                                      << c.heads << " heads, rows of " << c.width << ", values " << c.value_width);
    const Device gpu = Device::cuda();
    const Tensor q = testing::random_normal({c.queries, c.heads, c.width}, DType::BF16, gpu, rng(), 0.1f);
    const Tensor cache = testing::random_normal({c.keys + 21, c.width}, DType::BF16, gpu, rng());
    const double scale = 1.0 / std::sqrt(192.0);
    const Tensor out = testing::poisoned({c.queries, c.heads, c.value_width}, DType::BF16, gpu);
    ops::cuda::decode_latent_attention_forward(q, cache.narrow(0, c.keys), c.value_width, scale, out);
    const Tensor keys = testing::to_cpu_f32(cache.narrow(0, c.keys)).view({c.keys, 1, c.width});
    const Tensor values = heads_to_width(heads_to_width(keys, c.value_width), c.width);  // the value columns alone
    const ops::AttentionMask all_visible{.document_start = std::vector<int64_t>(size_t(c.keys), 0)};
    const Tensor expected = heads_to_width(
        ops::causal_attention_forward(testing::to_cpu_f32(q), keys, values, all_visible, scale, {}), c.value_width);
    EXPECT_LT(testing::relative_error(testing::to_cpu_f32(out), expected), testing::kBf16Tolerance);
  }
  const Tensor q = testing::random_normal({1, 2, 640}, DType::BF16, Device::cuda(), rng());
  const Tensor too_wide = testing::random_normal({4, 640}, DType::BF16, Device::cuda(), rng());
  EXPECT_THROW(ops::cuda::decode_latent_attention_forward(q, too_wide, 512, 0.1,
                                                          testing::poisoned({1, 2, 512}, DType::BF16, Device::cuda())),
               Error);
}

// Split boundaries sit at multiples of 128 keys: windows that end inside a split, start inside one, span several,
// equal a split, or reach back past key 0; each with and without sinks, one and several new tokens.
TEST_F(DecodeAttentionGpu, SlidingWindowsAndSinks) {
  for (const Sinks sinks : {Sinks::None, Sinks::F32, Sinks::BF16}) {
    for (const int64_t window : {int64_t(1), int64_t(4), int64_t(100), int64_t(128), int64_t(129), int64_t(300),
                                 int64_t(999), int64_t(1000), int64_t(5000)})
      check({.queries = 1, .keys = 1000, .window = window, .sinks = sinks});  // the last key at 999, inside split 7
    check({.queries = 1, .keys = 1, .window = 4, .sinks = sinks});            // a window longer than the sequence
    check({.queries = 1, .keys = 256, .window = 128, .sinks = sinks});        // exactly the last split
    check({.queries = 1, .keys = 257, .window = 128, .sinks = sinks});        // one key of split 2, 127 of split 1
    check({.queries = 3, .keys = 300, .window = 2, .sinks = sinks});
    check({.queries = 3, .keys = 300, .window = 200, .sinks = sinks});
    check({.queries = 130, .keys = 400, .window = 150, .sinks = sinks});  // windows from splits 0-1 to 2-3
    check({.queries = 130, .keys = 130, .window = 64, .sinks = sinks});   // a chunk from the start of the sequence
    // gpt_oss_tiny's attention, then GPT-OSS's (64 heads over 8, head_dim 64, window 128) on a long sequence
    check({.queries = 2, .keys = 26, .heads = 4, .kv_heads = 2, .head_dim = 8, .window = 4, .sinks = sinks});
    Case gpt_oss{.queries = 1, .keys = 4100, .heads = 64, .kv_heads = 8, .head_dim = 64, .window = 128};
    gpt_oss.sinks = sinks;
    check(gpt_oss);
    check({.queries = 1, .keys = 50, .heads = 4, .kv_heads = 4, .head_dim = 64, .window = 17, .sinks = sinks});  // MHA
  }
}

TEST_F(DecodeAttentionGpu, RefusesWhatItCannotRun) {
  const Device gpu = Device::cuda();
  const Tensor q = testing::random_normal({2, 4, 64}, DType::BF16, gpu, rng());
  const Tensor k = testing::random_normal({1, 2, 64}, DType::BF16, gpu, rng());  // fewer keys than new tokens
  const Tensor out = testing::poisoned({2, 4, 64}, DType::BF16, gpu);
  EXPECT_THROW(ops::cuda::decode_attention_forward(q, k, k, 0.125, out), Error);
  const Tensor wide = testing::random_normal({1, 1, 512}, DType::BF16, gpu, rng());
  EXPECT_THROW(ops::cuda::decode_attention_forward(wide, wide, wide, 0.125, testing::poisoned({1, 1, 512}, DType::BF16, gpu)), Error);
  const Tensor one_out = testing::poisoned({1, 4, 64}, DType::BF16, gpu);
  const Tensor one_q = q.narrow(0, 1);
  EXPECT_THROW(ops::cuda::decode_attention_forward(one_q, k, k, 0.125, one_out, /*window=*/-1), Error);
  const Tensor three_sinks = testing::random_normal({3}, DType::F32, gpu, rng());  // not one a head
  EXPECT_THROW(ops::cuda::decode_attention_forward(one_q, k, k, 0.125, one_out, 0, three_sinks), Error);
  const Tensor narrow_v = testing::random_normal({1, 2, 32}, DType::BF16, gpu, rng());
  EXPECT_THROW(ops::cuda::decode_attention_forward(one_q, k, narrow_v, 0.125, one_out), Error);  // out is q's width
}

}  // namespace
}  // namespace moetune
