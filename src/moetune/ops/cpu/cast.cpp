#include "moetune/core/half.h"
#include "moetune/ops/cast.h"

namespace moetune::ops::cpu {
namespace {

// Every conversion goes through f32 (f64 directly), which is exact for bf16 and f16 inputs.
float load(const void* data, int64_t i, DType dtype) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    default: fail("cast: unsupported source dtype {}", dtype_name(dtype));
  }
}

void store(void* data, int64_t i, DType dtype, float value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(data)[i] = value; return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(value); return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = f32_to_f16(value); return;
    default: fail("cast: unsupported destination dtype {}", dtype_name(dtype));
  }
}

}  // namespace

void cast_into(const Tensor& source, const Tensor& destination) {
  const int64_t n = source.numel();
  const void* in = source.raw_data();
  void* out = destination.raw_data();
  if (source.dtype() == DType::F64 || destination.dtype() == DType::F64) {
    // f64 <-> f32 directly; f64 <-> 16-bit through f32 (double rounding is acceptable for checkpoints).
    for (int64_t i = 0; i < n; ++i) {
      double value = source.dtype() == DType::F64 ? static_cast<const double*>(in)[i] : load(in, i, source.dtype());
      if (destination.dtype() == DType::F64)
        static_cast<double*>(out)[i] = value;
      else
        store(out, i, destination.dtype(), float(value));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) store(out, i, destination.dtype(), load(in, i, source.dtype()));
}

}  // namespace moetune::ops::cpu
