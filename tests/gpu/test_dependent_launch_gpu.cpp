// Programmatic dependent launch (ops/cuda/dependent_launch.cuh): a kernel launched that way may be scheduled
// before the kernel ahead of it in the stream has finished, so it must see every byte that kernel wrote. Here
// a ~1 ms GEMM writes 128 MB over an output poisoned with NaN, and the cast right behind it (a dependent launch)
// must read only the GEMM's values; then cast after cast (dependent after dependent).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/dependent_launch.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gemm.h"

namespace moetune {
namespace {

using testing::poisoned;
using testing::random_normal;

class DependentLaunchGpu : public testing::GpuTest {};

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

TEST_F(DependentLaunchGpu, KernelsBehindAGemmReadItsFinishedOutput) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  // On for every GPU of compute capability 9.0 or later unless MOETUNE_DEPENDENT_LAUNCH=0: say which ran.
  std::printf("dependent launches %s\n", gpu::dependent_launch_enabled() ? "on" : "off");
  const int64_t n = 8192;
  const Tensor a = random_normal({n, n}, DType::BF16, Device::cuda(), rng());
  const Tensor b = random_normal({n, n}, DType::BF16, Device::cuda(), rng());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const Tensor product = poisoned({n, n}, DType::BF16, Device::cuda());
    const Tensor widened = poisoned({n, n}, DType::F32, Device::cuda());
    const Tensor narrowed = poisoned({n, n}, DType::BF16, Device::cuda());
    ops::cuda::matmul(a, false, b, false, product);  // queued: nothing waits on the host until the copies below
    ops::cast_into(product, widened);
    ops::cast_into(widened, narrowed);
    // The reference: the same casts of the finished product, on the host.
    const Tensor expected_wide = ops::cast(product.to(Device::cpu()), DType::F32);
    EXPECT_TRUE(same_bytes(widened, expected_wide)) << "the cast read the GEMM's output before it was written";
    EXPECT_TRUE(same_bytes(narrowed, product)) << "the second cast read the first one's output before it was written";
  }
}

}  // namespace
}  // namespace moetune
