#include "moetune/ops/cuda/elementwise.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/elementwise_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// An output may be an input exactly (each element is read, then written, by one thread) but not overlap it in
// part, which would let one thread overwrite what another has yet to read.
void check_alias(std::string_view op, std::string_view out_name, const Tensor& out, std::string_view in_name,
                 const Tensor& in) {
  MOETUNE_CHECK(!overlaps(out, in) || out.raw_data() == in.raw_data(), "{}: {} {} partly overlaps {} {}", op,
                out_name, out.str(), in_name, in.str());
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out, float b_scale) {
  constexpr std::string_view op = "add";
  check_gpu_tensor(op, "a", a, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "b", b, {a.dtype()});
  check_gpu_tensor(op, "out", out, {a.dtype()});
  check_shape(op, "b", b, a.shape());
  check_shape(op, "out", out, a.shape());
  check_alias(op, "out", out, "a", a);
  check_alias(op, "out", out, "b", b);
  gpu::check(launch_add(a.raw_data(), 1.0f, b.raw_data(), b_scale, out.raw_data(), a.numel(), a.dtype() == DType::BF16,
                        gpu::stream()),
             "add kernel");
}

void scale(const Tensor& a, float factor, const Tensor& out) {
  constexpr std::string_view op = "scale";
  check_gpu_tensor(op, "a", a, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "out", out, {a.dtype()});
  check_shape(op, "out", out, a.shape());
  check_alias(op, "out", out, "a", a);
  gpu::check(launch_add(a.raw_data(), factor, nullptr, 0.0f, out.raw_data(), a.numel(), a.dtype() == DType::BF16,
                        gpu::stream()),
             "scale kernel");
}

}  // namespace moetune::ops::cuda
