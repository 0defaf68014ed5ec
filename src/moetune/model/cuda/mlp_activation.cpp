#include "moetune/model/cuda/mlp_activation.h"

#include "moetune/ops/cuda/activation.h"

namespace moetune::model::cuda {

int64_t activated_width(const MlpSpec& mlp, int64_t pre_activation_width) {
  return mlp.activation == Activation::ReluSquared ? pre_activation_width : pre_activation_width / 2;
}

void activation_forward(const MlpSpec& mlp, const Tensor& pre, const Tensor& out) {
  switch (mlp.activation) {
    case Activation::SwiGLU:
      return ops::cuda::gated_forward(pre, mlp.gate, out);
    case Activation::ClampedSwiGLU: return ops::cuda::clamped_swiglu_forward(pre, mlp.clamp, out);
    case Activation::ReluSquared: return ops::cuda::relu_squared_forward(pre, out);
  }
}

void activation_backward(const MlpSpec& mlp, const Tensor& dout, const Tensor& pre, const Tensor& dpre,
                         const Tensor& recomputed) {
  switch (mlp.activation) {
    case Activation::SwiGLU:
      return ops::cuda::gated_backward(dout, pre, mlp.gate, dpre, recomputed);
    case Activation::ClampedSwiGLU: return ops::cuda::clamped_swiglu_backward(dout, pre, mlp.clamp, dpre, recomputed);
    case Activation::ReluSquared:
      ops::cuda::relu_squared_backward(dout, pre, dpre);  // dout read before recomputed may overwrite it
      if (recomputed.defined()) ops::cuda::relu_squared_forward(pre, recomputed);
      return;
  }
}

}  // namespace moetune::model::cuda
