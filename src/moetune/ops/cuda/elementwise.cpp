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

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr std::string_view op = "add";
  check_gpu_tensor(op, "a", a, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "b", b, {a.dtype()});
  check_gpu_tensor(op, "out", out, {a.dtype()});
  check_shape(op, "b", b, a.shape());
  check_shape(op, "out", out, a.shape());
  check_alias(op, "out", out, "a", a);
  check_alias(op, "out", out, "b", b);
  gpu::check(launch_add(a.raw_data(), b.raw_data(), out.raw_data(), a.numel(), a.dtype() == DType::BF16,
                        gpu::stream()),
             "add kernel");
}

void add_bias(const Tensor& x, const Tensor& bias, const Tensor& y) {
  constexpr std::string_view op = "add_bias";
  check_gpu_tensor(op, "x", x, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "bias", bias, {x.dtype()});
  check_gpu_tensor(op, "y", y, {x.dtype()});
  MOETUNE_CHECK(bias.dim() == 1 && x.dim() >= 1 && x.size(-1) == bias.size(0), "{}: x {} does not end in bias {}'s width",
                op, x.str(), bias.str());
  check_shape(op, "y", y, x.shape());
  check_alias(op, "y", y, "x", x);
  MOETUNE_CHECK(!overlaps(y, bias), "{}: y {} overlaps the bias", op, y.str());
  const int64_t width = bias.size(0);
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  gpu::check(launch_add_bias(x.raw_data(), bias.raw_data(), y.raw_data(), rows, width, x.dtype() == DType::BF16,
                             gpu::stream()),
             "add_bias kernel");
}

}  // namespace moetune::ops::cuda
