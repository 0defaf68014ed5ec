#include "moetune/ops/cast.h"

namespace moetune::ops {

Tensor cast(const Tensor& source, DType dtype) {
  if (source.dtype() == dtype) return source.clone();
  Tensor destination = Tensor::empty(source.shape(), dtype, source.device());
  cast_into(source, destination);
  return destination;
}

void cast_into(const Tensor& source, const Tensor& destination) {
  MOETUNE_CHECK(source.numel() == destination.numel(), "cast of {} into {}: element counts differ",
                source.str(), destination.str());
  MOETUNE_CHECK(source.device() == destination.device(), "cast of {} into {}: devices differ", source.str(),
                destination.str());
  if (source.dtype() == destination.dtype()) {
    Tensor(destination).copy_from(source);
    return;
  }
  MOETUNE_CHECK(is_floating(source.dtype()) && is_floating(destination.dtype()),
                "cast of {} into {}: only float types convert", source.str(), destination.str());
  if (source.device().is_cuda())
    cuda::cast_into(source, destination);
  else
    cpu::cast_into(source, destination);
}

#if !MOETUNE_HAVE_CUDA
void cuda::cast_into(const Tensor& source, const Tensor&) {
  fail("cast of {}: {}", source.str(), cuda_unavailable_reason());
}
#endif

}  // namespace moetune::ops
