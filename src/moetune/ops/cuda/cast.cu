// bf16/f16 <-> f32 conversion kernels, one element per thread, grid-stride. The rounding is the shared
// host/device definition in core/half.h, so GPU and CPU results agree to the bit.
#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/ops/cuda/cast_kernels.h"

namespace moetune::ops::cuda {
namespace {

struct Bf16ToF32 { __device__ float operator()(uint16_t h) const { return bf16_to_f32(h); } };
struct F32ToBf16 { __device__ uint16_t operator()(float f) const { return f32_to_bf16(f); } };
struct F16ToF32 { __device__ float operator()(uint16_t h) const { return f16_to_f32(h); } };
struct F32ToF16 { __device__ uint16_t operator()(float f) const { return f32_to_f16(f); } };

template <typename In, typename Out, typename Convert>
__global__ void cast_kernel(const In* __restrict__ in, Out* __restrict__ out, int64_t n, Convert convert) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert(in[i]);
}

template <typename In, typename Out, typename Convert>
cudaError_t launch(const void* in, void* out, int64_t n, cudaStream_t stream, Convert convert) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  gpu::launch_dependent(cast_kernel<In, Out, Convert>, blocks, kThreads, 0, stream, static_cast<const In*>(in),
                        static_cast<Out*>(out), n, convert);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cast(CastKind kind, const void* in, void* out, int64_t n, cudaStream_t stream) {
  switch (kind) {
    case CastKind::Bf16ToF32: return launch<uint16_t, float>(in, out, n, stream, Bf16ToF32{});
    case CastKind::F32ToBf16: return launch<float, uint16_t>(in, out, n, stream, F32ToBf16{});
    case CastKind::F16ToF32: return launch<uint16_t, float>(in, out, n, stream, F16ToF32{});
    case CastKind::F32ToF16: return launch<float, uint16_t>(in, out, n, stream, F32ToF16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace moetune::ops::cuda
