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
    : config_(config),
      norm_(store.get(prefix + "post_attn_norm")),
      gate_up_(store.get(prefix + "mlp.gate_up")),
      gate_up_bias_(store.find(prefix + "mlp.gate_up_bias")),
      down_(store.get(prefix + "mlp.down")),
      down_bias_(store.find(prefix + "mlp.down_bias")) {}

Tensor DenseMlpBlock::forward(const Tensor& h) {
  const int64_t tokens = h.size(0), inner = gate_up_.value.size(0) / 2;
  input_ = h;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, norm_.value, config_.rms_norm_eps, normed);
  gate_up_out_ = device_like({tokens, 2 * inner});
  ops::cuda::linear_forward(normed, gate_up_.value, gate_up_bias_.value, gate_up_out_);
  normed = Tensor();
  Tensor activated = device_like({tokens, inner});
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  Tensor out = device_like(h.shape());
  ops::cuda::linear_forward(activated, down_.value, down_bias_.value, out);
  ops::cuda::add(out, h, out);
  return out;
}

Tensor DenseMlpBlock::backward(const Tensor& dout) {
  const int64_t tokens = dout.size(0), inner = gate_up_.value.size(0) / 2;
  Tensor activated = device_like({tokens, inner});  // recomputed
  ops::cuda::swiglu_forward(gate_up_out_, activated);
  Tensor dactivated = device_like({tokens, inner});
  ops::cuda::linear_backward(dout, activated, down_.value, dactivated, down_.grad, down_bias_.grad);
  activated = Tensor();
  Tensor dgate_up = device_like({tokens, 2 * inner});
  ops::cuda::swiglu_backward(dactivated, gate_up_out_, dgate_up);
  dactivated = Tensor();
  Tensor normed = device_like(input_.shape());
  ops::cuda::rms_norm_forward(input_, norm_.value, config_.rms_norm_eps, normed);
  Tensor dnormed = device_like(input_.shape());
  ops::cuda::linear_backward(dgate_up, normed, gate_up_.value, dnormed, gate_up_.grad, gate_up_bias_.grad);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, norm_.value, config_.rms_norm_eps, dh, norm_.grad, dout);
  clear_stash();
  return dh;
}

size_t DenseMlpBlock::stash_bytes() const { return held_bytes({&input_, &gate_up_out_}); }

}  // namespace moetune::model::cuda
