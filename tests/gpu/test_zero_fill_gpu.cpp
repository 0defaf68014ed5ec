// gpu::zero_async (core/zero_fill.cu): the kernel for small clears and the memset past 1 MiB zero exactly the
// bytes asked for, at any alignment, and nothing around them.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"

namespace moetune {
namespace {

class ZeroFillGpu : public testing::GpuTest {};

TEST_F(ZeroFillGpu, ClearsExactlyTheBytesAskedFor) {
  const size_t room = (size_t(1) << 20) + 64;
  unsigned char* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, room), cudaSuccess);
  std::vector<unsigned char> host(room);
  for (size_t bytes : {size_t(1), size_t(3), size_t(15), size_t(16), size_t(17), size_t(255), size_t(4096),
                       size_t(4100), size_t(1) << 20, (size_t(1) << 20) + 5})
    for (size_t offset : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(13)}) {
      if (offset + bytes > room) continue;
      SCOPED_TRACE(::testing::Message() << bytes << " bytes at offset " << offset);
      ASSERT_EQ(cudaMemset(buffer, 0xAB, room), cudaSuccess);
      ASSERT_EQ(gpu::zero_async(buffer + offset, bytes, gpu::stream()), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(gpu::stream()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(host.data(), buffer, room, cudaMemcpyDeviceToHost), cudaSuccess);
      size_t wrong = 0;
      for (size_t i = 0; i < room; ++i) wrong += host[i] != (i >= offset && i < offset + bytes ? 0 : 0xAB);
      EXPECT_EQ(wrong, 0u);
    }
  EXPECT_EQ(gpu::zero_async(buffer, 0, gpu::stream()), cudaSuccess);
  cudaFree(buffer);
}

}  // namespace
}  // namespace moetune
