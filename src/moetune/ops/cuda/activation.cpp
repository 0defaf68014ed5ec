#include "moetune/ops/cuda/activation.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/activation_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// Rows and inner width of gate_up [R, 2I].
std::pair<int64_t, int64_t> checked_gate_up(std::string_view op, const Tensor& gate_up) {
  check_gpu_tensor(op, "gate_up", gate_up, {DType::BF16});
  MOETUNE_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "{}: gate_up {} must be [R, 2I]", op,
                gate_up.str());
  return {gate_up.size(0), gate_up.size(1) / 2};
}

void check_forward(std::string_view op, const Tensor& gate_up, const Tensor& out) {
  const auto [rows, inner] = checked_gate_up(op, gate_up);
  check_gpu_tensor(op, "out", out, {DType::BF16});
  check_shape(op, "out", out, {rows, inner});
  MOETUNE_CHECK(!overlaps(out, gate_up), "{}: out {} overlaps gate_up", op, out.str());
}

// recomputed: undefined, dout itself, or apart from every other operand.
void check_backward(std::string_view op, const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                    const Tensor& recomputed) {
  const auto [rows, inner] = checked_gate_up(op, gate_up);
  check_gpu_tensor(op, "dout", dout, {DType::BF16});
  check_shape(op, "dout", dout, {rows, inner});
  check_gpu_tensor(op, "dgate_up", dgate_up, {DType::BF16});
  check_shape(op, "dgate_up", dgate_up, gate_up.shape());
  MOETUNE_CHECK(!overlaps(dgate_up, gate_up) && !overlaps(dgate_up, dout), "{}: dgate_up {} overlaps an input", op,
                dgate_up.str());
  if (!recomputed.defined()) return;
  check_gpu_tensor(op, "recomputed", recomputed, {DType::BF16});
  check_shape(op, "recomputed", recomputed, {rows, inner});
  const bool is_dout = recomputed.raw_data() == dout.raw_data();
  MOETUNE_CHECK(!overlaps(recomputed, gate_up) && !overlaps(recomputed, dgate_up) && (is_dout || !overlaps(recomputed, dout)),
                "{}: recomputed {} must be dout itself or overlap no operand", op, recomputed.str());
}

// Tensors of one shape, BF16 on the GPU; `out` overlaps none of `inputs`.
void check_elementwise(std::string_view op, std::initializer_list<std::pair<const char*, const Tensor*>> inputs,
                       const char* out_name, const Tensor& out) {
  const Tensor& first = *inputs.begin()->second;
  for (const auto& [name, t] : inputs) {
    check_gpu_tensor(op, name, *t, {DType::BF16});
    check_shape(op, name, *t, first.shape());
    MOETUNE_CHECK(!overlaps(out, *t), "{}: {} {} overlaps {}", op, out_name, out.str(), name);
  }
  check_gpu_tensor(op, out_name, out, {DType::BF16});
  check_shape(op, out_name, out, first.shape());
}

}  // namespace

void relu_squared_forward(const Tensor& x, const Tensor& out) {
  check_elementwise("relu_squared_forward", {{"x", &x}}, "out", out);
  gpu::check(launch_relu_squared_forward(x.raw_data(), out.raw_data(), x.numel(), gpu::stream()),
             "relu_squared_forward kernel");
}

void relu_squared_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  check_elementwise("relu_squared_backward", {{"dout", &dout}, {"x", &x}}, "dx", dx);
  gpu::check(launch_relu_squared_backward(dout.raw_data(), x.raw_data(), dx.raw_data(), x.numel(), gpu::stream()),
             "relu_squared_backward kernel");
}

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  check_forward("swiglu_forward", gate_up, out);
  gpu::check(launch_swiglu_forward(gate_up.raw_data(), out.raw_data(), gate_up.size(0), gate_up.size(1) / 2,
                                   gpu::stream()),
             "swiglu_forward kernel");
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up, const Tensor& recomputed) {
  check_backward("swiglu_backward", dout, gate_up, dgate_up, recomputed);
  gpu::check(launch_swiglu_backward(dout.raw_data(), gate_up.raw_data(), dgate_up.raw_data(),
                                    recomputed.defined() ? recomputed.raw_data() : nullptr, gate_up.size(0),
                                    gate_up.size(1) / 2, gpu::stream()),
             "swiglu_backward kernel");
}

static_assert(int(KernelGate::Silu) == int(GateFunction::Silu) && int(KernelGate::Gelu) == int(GateFunction::Gelu) &&
                  int(KernelGate::GeluTanh) == int(GateFunction::GeluTanh) &&
                  int(KernelGate::QuickGelu) == int(GateFunction::QuickGelu) &&
                  int(KernelGate::Relu) == int(GateFunction::Relu),
              "activation_kernels.h's KernelGate mirrors ops::GateFunction");

void gated_forward(const Tensor& gate_up, GateFunction gate, const Tensor& out) {
  check_forward("gated_forward", gate_up, out);
  gpu::check(launch_gated_forward(KernelGate(int(gate)), gate_up.raw_data(), out.raw_data(), gate_up.size(0),
                                  gate_up.size(1) / 2, gpu::stream()),
             "gated_forward kernel");
}

void gated_backward(const Tensor& dout, const Tensor& gate_up, GateFunction gate, const Tensor& dgate_up,
                    const Tensor& recomputed) {
  check_backward("gated_backward", dout, gate_up, dgate_up, recomputed);
  gpu::check(launch_gated_backward(KernelGate(int(gate)), dout.raw_data(), gate_up.raw_data(), dgate_up.raw_data(),
                                   recomputed.defined() ? recomputed.raw_data() : nullptr, gate_up.size(0),
                                   gate_up.size(1) / 2, gpu::stream()),
             "gated_backward kernel");
}

void clamped_swiglu_forward(const Tensor& gate_up, const SwigluClamp& clamp, const Tensor& out) {
  check_forward("clamped_swiglu_forward", gate_up, out);
  gpu::check(launch_clamped_swiglu_forward(gate_up.raw_data(), out.raw_data(), gate_up.size(0), gate_up.size(1) / 2,
                                           clamp.alpha, clamp.limit, gpu::stream()),
             "clamped_swiglu_forward kernel");
}

void clamped_swiglu_backward(const Tensor& dout, const Tensor& gate_up, const SwigluClamp& clamp,
                             const Tensor& dgate_up, const Tensor& recomputed) {
  check_backward("clamped_swiglu_backward", dout, gate_up, dgate_up, recomputed);
  gpu::check(launch_clamped_swiglu_backward(dout.raw_data(), gate_up.raw_data(), dgate_up.raw_data(),
                                            recomputed.defined() ? recomputed.raw_data() : nullptr, gate_up.size(0),
                                            gate_up.size(1) / 2, clamp.alpha, clamp.limit, gpu::stream()),
             "clamped_swiglu_backward kernel");
}

}  // namespace moetune::ops::cuda
