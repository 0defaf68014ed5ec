#include "moetune/model/cuda/swiglu_mlp.h"

#include <cstdint>

#include "moetune/model/cuda/mlp_activation.h"
#include "moetune/model/cuda/swiglu_backward_choice.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }

// d(activated) = dout · down in one group of the grouped kernel with SwiGLU's backward in its epilogue (the
// routed experts' op, model/cuda/swiglu_backward_choice.h): d(gate_up), and the activation when `activated` is
// defined, without d(activated)'s round trip. Where it does not apply (another activation, widths TMA cannot
// move) the caller runs the two passes.
bool backward_in_epilogue(const MlpSpec& mlp, const Tensor& down, const Tensor& dout, const Tensor& gate_up) {
  const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; };
  return swiglu_backward_in_epilogue() && mlp.silu_gated() && down.size(0) % 8 == 0 && down.size(1) % 8 == 0 &&
         aligned(down) && aligned(dout) && aligned(gate_up);
}
void down_input_grad_with_swiglu_backward(const Tensor& dout, const Tensor& down, const Tensor& gate_up,
                                          const Tensor& dgate_up, const Tensor& activated) {
  ops::cuda::grouped_matmul_swiglu_backward(dout, down.view({1, down.size(0), down.size(1)}),
                                            ops::cuda::one_group_offsets(dout.size(0)), gate_up, dgate_up, activated);
}
}  // namespace

Tensor swiglu_mlp(const Tensor& x, const SwigluParams& p, const Tensor& out, SwigluLora* lora, const MlpSpec& mlp,
                  const Tensor& residual, Tensor* kept_activation) {
  const int64_t tokens = x.size(0), first = p.gate_up.value.size(0), inner = activated_width(mlp, first);
  Tensor gate_up = device_like({tokens, first});
  ops::cuda::linear_forward(x, p.gate_up.value, p.gate_up_bias.value, gate_up);
  if (lora) lora->gate_up.forward(x, gate_up, lora->pass);
  Tensor activated = device_like({tokens, inner});
  activation_forward(mlp, gate_up, activated);
  if (residual.defined())
    ops::cuda::linear_forward_residual(activated, p.down.value, p.down_bias.value, residual, out);
  else
    ops::cuda::linear_forward(activated, p.down.value, p.down_bias.value, out);
  if (lora) lora->down.forward(activated, out, lora->pass);
  if (kept_activation) *kept_activation = activated;
  return gate_up;
}

void swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p,
                         const Tensor& dx, bool accumulate_dx, SwigluLora* lora, const MlpSpec& mlp,
                         bool write_weight_grads, const Tensor& activation) {
  const int64_t tokens = dout.size(0), first = p.gate_up.value.size(0), inner = activated_width(mlp, first);
  Tensor dgate_up = device_like({tokens, first});
  const bool lora_on_down = lora && !lora->down.empty();
  if (lora_on_down || activation.defined()) {
    // Down's two gradients read the activation: the forward's, kept, or (LoRA on down, which also adds to
    // d(activated)) recomputed first as its own pass; the activation's backward then writes d(gate_up) alone.
    Tensor activated = activation;
    if (!activated.defined()) {
      activated = device_like({tokens, inner});
      activation_forward(mlp, gate_up, activated);
    }
    if (!lora_on_down && backward_in_epilogue(mlp, p.down.value, dout, gate_up)) {
      ops::cuda::linear_backward(dout, activated, p.down.value, {}, p.down.grad, p.down_bias.grad, false,
                                 write_weight_grads);
      activated = Tensor();
      down_input_grad_with_swiglu_backward(dout, p.down.value, gate_up, dgate_up, Tensor());
    } else {
      Tensor dactivated = device_like({tokens, inner});
      ops::cuda::linear_backward(dout, activated, p.down.value, dactivated, p.down.grad, p.down_bias.grad, false,
                                 write_weight_grads);
      if (lora_on_down) lora->down.backward(dout, activated, dactivated);
      activated = Tensor();
      activation_backward(mlp, dactivated, gate_up, dgate_up);
    }
  } else if (backward_in_epilogue(mlp, p.down.value, dout, gate_up)) {
    Tensor activated = device_like({tokens, inner});  // recomputed by the epilogue, for down's weight gradient
    down_input_grad_with_swiglu_backward(dout, p.down.value, gate_up, dgate_up, activated);
    ops::cuda::linear_backward(dout, activated, p.down.value, {}, p.down.grad, p.down_bias.grad, false,
                               write_weight_grads);
  } else {
    // d(activated) first; the activation's backward then writes the recomputed activation over it (what down's
    // weight gradient reads): one pass over the pre-activation instead of two, and no more memory.
    Tensor activated = device_like({tokens, inner});
    ops::cuda::matmul(dout, false, p.down.value, false, activated);
    activation_backward(mlp, activated, gate_up, dgate_up, /*recomputed=*/activated);
    ops::cuda::linear_backward(dout, activated, p.down.value, {}, p.down.grad, p.down_bias.grad, false,
                               write_weight_grads);
  }
  ops::cuda::linear_backward(dgate_up, x, p.gate_up.value, dx, p.gate_up.grad, p.gate_up_bias.grad, accumulate_dx,
                             write_weight_grads);
  if (lora) lora->gate_up.backward(dgate_up, x, dx);
}

void add_swiglu_weight_grads(const SwigluParams& p, std::vector<Tensor>& grads) {
  for (const Tensor& grad : {p.gate_up.grad, p.down.grad})
    if (grad.defined()) grads.push_back(grad);
}

}  // namespace moetune::model::cuda
