#include "moetune/model/cuda/mlp_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config), p_(MlpParams::lookup(store, prefix)) {}

Tensor DenseMlpBlock::forward(const Tensor& h) {
  const int64_t tokens = h.size(0), inner = p_.gate_up.value.size(0) / 2;
  input_ = h;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, config_.rms_norm_eps, normed);
  gate_up_out_ = device_like({tokens, 2 * inner});
  ops::cuda::linear_forward(normed, p_.gate_up.value, p_.gate_up_bias.value, gate_up_out_);
  normed = Tensor();
  Tensor activated = device_like({tokens, inner});
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  Tensor out = device_like(h.shape());
  ops::cuda::linear_forward(activated, p_.down.value, p_.down_bias.value, out);
  ops::cuda::add(out, h, out);
  return out;
}

Tensor DenseMlpBlock::backward(const Tensor& dout) {
  const int64_t tokens = dout.size(0), inner = p_.gate_up.value.size(0) / 2;
  Tensor activated = device_like({tokens, inner});  // recomputed
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  Tensor dactivated = device_like({tokens, inner});
  ops::cuda::linear_backward(dout, activated, p_.down.value, dactivated, p_.down.grad, p_.down_bias.grad);
  activated = Tensor();
  Tensor dgate_up = device_like({tokens, 2 * inner});
  ops::cuda::swiglu_backward(dactivated, gate_up_out_, dgate_up);
  dactivated = Tensor();
  Tensor normed = device_like(input_.shape());
  ops::cuda::rms_norm_forward(input_, p_.norm.value, config_.rms_norm_eps, normed);
  Tensor dnormed = device_like(input_.shape());
  ops::cuda::linear_backward(dgate_up, normed, p_.gate_up.value, dnormed, p_.gate_up.grad, p_.gate_up_bias.grad);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, p_.norm.value, config_.rms_norm_eps, dh, p_.norm.grad, dout);
  clear_stash();
  return dh;
}

size_t DenseMlpBlock::stash_bytes() const { return held_bytes({&input_, &gate_up_out_}); }

}  // namespace moetune::model::cuda
