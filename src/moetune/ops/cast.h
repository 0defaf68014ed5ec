// Element-type conversion between the float types (f64, f32, bf16, f16), on the CPU or the GPU,
// rounding to nearest even. Same-dtype casts are plain copies, so integer tensors pass through too.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

Tensor cast(const Tensor& source, DType dtype);
// Writes `source` converted into `destination` (same numel, same device).
void cast_into(const Tensor& source, const Tensor& destination);

namespace cpu {
void cast_into(const Tensor& source, const Tensor& destination);
}
namespace cuda {
void cast_into(const Tensor& source, const Tensor& destination);
}

}  // namespace moetune::ops
