#include "moetune/ops/cuda/attention_sinks.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/attention_sinks_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

struct SinkShape {
  int64_t tokens, heads, head_dim;
};

SinkShape checked(std::string_view op, const Tensor& sinks, const Tensor& out, const Tensor& stats) {
  check_gpu_tensor(op, "out", out, {DType::BF16});
  MOETUNE_CHECK(out.dim() == 3, "{}: out {} must be [T, heads, head_dim]", op, out.str());
  const SinkShape s{out.size(0), out.size(1), out.size(2)};
  check_gpu_tensor(op, "stats", stats, DType::F32, {s.tokens, s.heads});
  check_gpu_tensor(op, "sinks", sinks, {DType::BF16, DType::F32});
  check_shape(op, "sinks", sinks, {s.heads});
  check_fits_int32(op, "heads", s.heads);
  check_fits_int32(op, "head_dim", s.head_dim);
  return s;
}

}  // namespace

void attention_sinks_forward(const Tensor& sinks, const Tensor& out, const Tensor& stats) {
  constexpr std::string_view op = "attention_sinks_forward";
  const SinkShape s = checked(op, sinks, out, stats);
  gpu::check(launch_attention_sinks_forward(sinks.raw_data(), sinks.dtype() == DType::BF16, out.raw_data(),
                                            device_data<float>(stats), s.tokens, int(s.heads), int(s.head_dim),
                                            gpu::stream()),
             fmt::format("{} of {}", op, out.str()));
}

void attention_sinks_backward(const Tensor& sinks, const Tensor& dout, const Tensor& out, const Tensor& stats,
                              const Tensor& dsinks) {
  constexpr std::string_view op = "attention_sinks_backward";
  const SinkShape s = checked(op, sinks, out, stats);
  check_gpu_tensor(op, "dout", dout, {DType::BF16});
  check_shape(op, "dout", dout, out.shape());
  check_gpu_tensor(op, "dsinks", dsinks, {DType::BF16, DType::F32});
  check_shape(op, "dsinks", dsinks, {s.heads});
  gpu::check(launch_attention_sinks_backward(sinks.raw_data(), sinks.dtype() == DType::BF16, dout.raw_data(),
                                             out.raw_data(), device_data<float>(stats), s.tokens, int(s.heads),
                                             int(s.head_dim), dsinks.raw_data(), dsinks.dtype() == DType::BF16,
                                             gpu::stream()),
             fmt::format("{} of {}", op, out.str()));
}

}  // namespace moetune::ops::cuda
