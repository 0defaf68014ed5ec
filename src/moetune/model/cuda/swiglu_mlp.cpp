#include "moetune/model/cuda/swiglu_mlp.h"

#include "moetune/model/cuda/mlp_activation.h"
#include "moetune/ops/cuda/gemm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
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
    Tensor dactivated = device_like({tokens, inner});
    ops::cuda::linear_backward(dout, activated, p.down.value, dactivated, p.down.grad, p.down_bias.grad, false,
                               write_weight_grads);
    if (lora_on_down) lora->down.backward(dout, activated, dactivated);
    activated = Tensor();
    activation_backward(mlp, dactivated, gate_up, dgate_up);
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
