#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/cast_kernels.h"

namespace moetune::ops::cuda {

void cast_into(const Tensor& source, const Tensor& destination) {
  const DType from = source.dtype(), to = destination.dtype();
  CastKind kind;
  if (from == DType::BF16 && to == DType::F32) kind = CastKind::Bf16ToF32;
  else if (from == DType::F32 && to == DType::BF16) kind = CastKind::F32ToBf16;
  else if (from == DType::F16 && to == DType::F32) kind = CastKind::F16ToF32;
  else if (from == DType::F32 && to == DType::F16) kind = CastKind::F32ToF16;
  else fail("cast from {} to {} is not implemented on the GPU", dtype_name(from), dtype_name(to));
  gpu::check(launch_cast(kind, source.raw_data(), destination.raw_data(), source.numel(), gpu::stream()),
              fmt::format("cast of {}", source.str()));
}

}  // namespace moetune::ops::cuda
