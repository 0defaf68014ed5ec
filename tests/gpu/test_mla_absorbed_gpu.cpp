// Latent MLA decoding (ops/cuda/mla_absorbed.h with decode_latent_attention_forward) against the expanded form it
// replaces, computed on the CPU in fp32 from the same bf16 inputs: per head k = [W_uk c | k_rope] and v = W_uv c
// from the cached rows [c | k_rope], then ordinary attention. Equal up to bf16 rounding of q_abs, the attended
// latent and the output (each rounded once, as a GEMM writes it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/decode_attention.h"
#include "moetune/ops/cuda/mla_absorbed.h"

namespace moetune {
namespace {

class MlaAbsorbedGpu : public testing::GpuTest {};

struct Widths {
  int64_t heads, nope, rope, v_dim, latent, q_width, out_width, queries, keys;
};

TEST_F(MlaAbsorbedGpu, EqualsTheExpandedHeads) {
  // DeepSeek-V3's per-head widths (fewer heads), the tiny fixture's with padded q and out heads, and odd widths.
  for (const Widths& w : {Widths{4, 128, 64, 128, 512, 192, 128, 1, 300}, Widths{4, 16, 8, 16, 16, 24, 16, 3, 40},
                          Widths{3, 12, 4, 20, 36, 24, 24, 2, 70}}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", heads " << w.heads << ", nope " << w.nope << ", rope "
                                      << w.rope << ", v " << w.v_dim << ", latent " << w.latent);
    const Device gpu = Device::cuda();
    Tensor q = testing::random_normal({w.queries, w.heads, w.q_width}, DType::BF16, gpu, rng());
    {  // q's columns past nope + rope are zero, as attention's padded q holds them
      Tensor host = testing::to_cpu_f32(q);
      for (int64_t r = 0; r < w.queries * w.heads; ++r)
        for (int64_t i = w.nope + w.rope; i < w.q_width; ++i) host.data<float>()[r * w.q_width + i] = 0.0f;
      q = ops::cast(host, DType::BF16).to(gpu);
    }
    const Tensor kv_b = testing::random_normal({w.heads * (w.nope + w.v_dim), w.latent}, DType::BF16, gpu, rng(),
                                               float(1.0 / std::sqrt(double(w.latent))));
    const Tensor rows = testing::random_normal({w.keys, w.latent + w.rope}, DType::BF16, gpu, rng());
    const double scale = 1.0 / std::sqrt(double(w.nope + w.rope));
    const ops::cuda::MlaAbsorbedWidths widths{w.nope, w.rope, w.v_dim, w.latent};

    Tensor q_abs = testing::poisoned({w.queries, w.heads, w.latent + w.rope}, DType::BF16, gpu);
    ops::cuda::mla_absorb_q(q, kv_b, widths, q_abs);
    Tensor o_latent = testing::poisoned({w.queries, w.heads, w.latent}, DType::BF16, gpu);
    ops::cuda::decode_latent_attention_forward(q_abs, rows, w.latent, scale, o_latent);
    Tensor attended = testing::poisoned({w.queries, w.heads, w.out_width}, DType::BF16, gpu);
    ops::cuda::mla_absorb_out(o_latent, kv_b, widths, attended);

    // The expanded heads in fp32: k [L, heads, nope + rope], v [L, heads, nope + rope] (v_dim columns, zeros after).
    const Tensor c_rows = testing::to_cpu_f32(rows), weight = testing::to_cpu_f32(kv_b), q_cpu = testing::to_cpu_f32(q);
    const int64_t width = std::max(w.nope + w.rope, w.v_dim);
    Tensor k = Tensor::zeros({w.keys, w.heads, width}, DType::F32),
           v = Tensor::zeros({w.keys, w.heads, width}, DType::F32);
    Tensor q_wide = Tensor::zeros({w.queries, w.heads, width}, DType::F32);
    const float* cr = c_rows.data<float>();
    const float* wt = weight.data<float>();
    for (int64_t j = 0; j < w.keys; ++j)
      for (int64_t h = 0; h < w.heads; ++h) {
        float* kh = k.data<float>() + (j * w.heads + h) * width;
        float* vh = v.data<float>() + (j * w.heads + h) * width;
        for (int64_t i = 0; i < w.nope + w.v_dim; ++i) {
          double sum = 0;
          for (int64_t c = 0; c < w.latent; ++c)
            sum += double(wt[(h * (w.nope + w.v_dim) + i) * w.latent + c]) * cr[j * (w.latent + w.rope) + c];
          if (i < w.nope)
            kh[i] = float(sum);
          else
            vh[i - w.nope] = float(sum);
        }
        for (int64_t r = 0; r < w.rope; ++r) kh[w.nope + r] = cr[j * (w.latent + w.rope) + w.latent + r];
      }
    for (int64_t r = 0; r < w.queries * w.heads; ++r)
      for (int64_t i = 0; i < w.nope + w.rope; ++i)
        q_wide.data<float>()[r * width + i] = q_cpu.data<float>()[r * w.q_width + i];
    const ops::AttentionMask all_visible{.document_start = std::vector<int64_t>(size_t(w.keys), 0)};
    const Tensor expanded = ops::causal_attention_forward(q_wide, k, v, all_visible, scale);
    Tensor expected = Tensor::zeros({w.queries, w.heads, w.out_width}, DType::F32);
    for (int64_t r = 0; r < w.queries * w.heads; ++r)
      for (int64_t i = 0; i < w.v_dim; ++i)
        expected.data<float>()[r * w.out_width + i] = expanded.data<float>()[r * width + i];
    const double error = testing::relative_error(testing::to_cpu_f32(attended), expected);
    std::printf("absorbed against expanded heads (latent %lld): relative error %.2e\n",
                static_cast<long long>(w.latent), error);
    EXPECT_LT(error, 2 * testing::kBf16Tolerance);
  }
}

TEST_F(MlaAbsorbedGpu, RefusesMismatchedWeights) {
  const Device gpu = Device::cuda();
  const Tensor q = testing::random_normal({1, 2, 24}, DType::BF16, gpu, rng());
  const Tensor wrong = testing::random_normal({2 * 30, 16}, DType::BF16, gpu, rng());  // not heads·(nope + v_dim)
  const ops::cuda::MlaAbsorbedWidths widths{16, 8, 16, 16};
  EXPECT_THROW(ops::cuda::mla_absorb_q(q, wrong, widths, testing::poisoned({1, 2, 24}, DType::BF16, gpu)), Error);
  const Tensor o = testing::random_normal({1, 2, 16}, DType::BF16, gpu, rng());
  EXPECT_THROW(ops::cuda::mla_absorb_out(o, wrong, widths, testing::poisoned({1, 2, 8}, DType::BF16, gpu)), Error);
}

}  // namespace
}  // namespace moetune
