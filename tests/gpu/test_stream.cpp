// Ops run on the current stream: a StreamScope moves them onto another stream, and scopes nest and restore.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/elementwise.h"

namespace moetune {
namespace {

using testing::relative_error;
using testing::to_cpu_f32;

class StreamGpu : public testing::GpuTest {};

TEST_F(StreamGpu, ScopesNestAndRestore) {
  cudaStream_t a = nullptr, b = nullptr;
  gpu::check(cudaStreamCreate(&a), "cudaStreamCreate");
  gpu::check(cudaStreamCreate(&b), "cudaStreamCreate");
  EXPECT_EQ(gpu::stream(), gpu::engine_stream());
  {
    gpu::StreamScope outer(a);
    EXPECT_EQ(gpu::stream(), a);
    {
      gpu::StreamScope inner(b);
      EXPECT_EQ(gpu::stream(), b);
    }
    EXPECT_EQ(gpu::stream(), a);
  }
  EXPECT_EQ(gpu::stream(), gpu::engine_stream());
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST_F(StreamGpu, OpsUnderAScopeRunOnItsStream) {
  cudaStream_t side = nullptr;
  gpu::check(cudaStreamCreate(&side), "cudaStreamCreate");
  {
    gpu::StreamScope scope(side);
    const Tensor x = testing::random_normal({4096}, DType::F32, Device::cuda(), rng());
    const Tensor y = testing::random_normal({4096}, DType::F32, Device::cuda(), rng());
    const Tensor out = testing::poisoned({4096}, DType::F32, Device::cuda());
    ops::cuda::add(x, y, out);
    gpu::check(cudaStreamSynchronize(side), "side stream");
    Tensor expected = to_cpu_f32(x);
    const Tensor y_host = to_cpu_f32(y);
    for (int64_t i = 0; i < 4096; ++i) expected.data<float>()[i] += y_host.data<float>()[i];
    EXPECT_LT(relative_error(out, expected), 1e-6);
    gpu::synchronize("side stream work");
  }
  cudaStreamDestroy(side);
}

}  // namespace
}  // namespace moetune
