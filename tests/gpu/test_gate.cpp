// The sigmoid gate (Qwen2-MoE's shared expert) on the GPU against the CPU reference, forward and backward.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gate.h"
#include "moetune/ops/gate.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::relative_error;
using testing::to_cpu_f32;

class GateGpu : public testing::GpuTest {};

TEST_F(GateGpu, ForwardAndBackwardMatchCpu) {
  SCOPED_TRACE(seed());
  for (int64_t tokens : {1, 37, 1024}) {
    for (int64_t width : {32, 2048, 100}) {
      SCOPED_TRACE(::testing::Message() << tokens << " x " << width);
      const Tensor base = testing::random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
      const Tensor y = testing::random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
      const Tensor dout = testing::random_normal({tokens, width}, DType::BF16, Device::cuda(), rng());
      const Tensor logits = testing::random_normal({tokens, 1}, DType::F32, Device::cuda(), rng(), 2.0f);
      const Tensor out = poisoned({tokens, width}, DType::BF16, Device::cuda());
      ops::cuda::sigmoid_gated_add(base, y, logits, out);
      const Tensor logits_cpu = to_cpu_f32(logits);
      EXPECT_LT(relative_error(out, ops::sigmoid_gated_add(to_cpu_f32(base), to_cpu_f32(y), logits_cpu)), kBf16Tolerance);

      const Tensor dy = poisoned({tokens, width}, DType::BF16, Device::cuda());
      const Tensor dlogits = poisoned({tokens, 1}, DType::F32, Device::cuda());
      ops::cuda::sigmoid_gated_add_backward(dout, y, logits, dy, dlogits);
      const ops::SigmoidGateGrads expected = ops::sigmoid_gated_add_backward(to_cpu_f32(dout), to_cpu_f32(y), logits_cpu);
      EXPECT_LT(relative_error(dy, expected.dy), kBf16Tolerance);
      EXPECT_LT(relative_error(dlogits, expected.dlogits), 1e-4);  // f32 sums of bf16 products
    }
  }
}

TEST_F(GateGpu, InPlaceOnTheBase) {
  const Tensor base = testing::random_normal({5, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor y = testing::random_normal({5, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor logits = testing::random_normal({5, 1}, DType::F32, Device::cuda(), rng());
  const Tensor expected = ops::sigmoid_gated_add(to_cpu_f32(base), to_cpu_f32(y), to_cpu_f32(logits));
  ops::cuda::sigmoid_gated_add(base, y, logits, base);
  EXPECT_LT(relative_error(base, expected), kBf16Tolerance);
}

}  // namespace
}  // namespace moetune
