#include "moetune/model/cuda/attention_block.h"

#include <cmath>

#include "moetune/model/block_util.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/qkv_rope.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }
}  // namespace

AttentionBlock::AttentionBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config), p_(AttentionParams::lookup(store, prefix)) {}

Tensor AttentionBlock::forward(const Tensor& h, const DeviceBatch& batch, const Tensor& inv_freq) {
  const int64_t tokens = h.size(0), d = config_.head_dim, nq = config_.num_attention_heads, nkv = config_.num_key_value_heads;
  const double eps = config_.rms_norm_eps;
  stash_.input = h;
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.input_norm.value, eps, normed);
  stash_.qkv = device_like({tokens, (nq + 2 * nkv) * d});
  ops::cuda::linear_forward(normed, p_.qkv.value, p_.qkv_bias.value, stash_.qkv);
  normed = Tensor();
  stash_.q = device_like({tokens, nq, d});
  stash_.k = device_like({tokens, nkv, d});
  stash_.v = device_like({tokens, nkv, d});
  ops::cuda::qkv_norm_rope_forward(stash_.qkv, p_.q_norm.value, p_.k_norm.value, eps, inv_freq, batch.positions, stash_.q,
                                   stash_.k, stash_.v);
  stash_.attended = device_like({tokens, nq, d});
  stash_.softmax_stats = ops::cuda::flash_attention_forward(stash_.q, stash_.k, stash_.v, batch.documents,
                                                            1.0 / std::sqrt(double(d)), stash_.attended);
  Tensor out = device_like(h.shape());
  ops::cuda::linear_forward(stash_.attended.view({tokens, nq * d}), p_.o.value, p_.o_bias.value, out);
  ops::cuda::add(out, h, out);
  return out;
}

Tensor AttentionBlock::backward(const Tensor& dout, const DeviceBatch& batch, const Tensor& inv_freq) {
  const int64_t tokens = dout.size(0), d = config_.head_dim, nq = config_.num_attention_heads, nkv = config_.num_key_value_heads;
  const double eps = config_.rms_norm_eps;
  Tensor dattended = device_like({tokens, nq * d});
  ops::cuda::linear_backward(dout, stash_.attended.view({tokens, nq * d}), p_.o.value, dattended, p_.o.grad, p_.o_bias.grad);
  Tensor dq = device_like({tokens, nq, d}), dk = device_like({tokens, nkv, d}), dv = device_like({tokens, nkv, d});
  ops::cuda::flash_attention_backward(dattended.view({tokens, nq, d}), stash_.q, stash_.k, stash_.v, stash_.attended,
                                      stash_.softmax_stats, batch.documents, 1.0 / std::sqrt(double(d)), dq, dk, dv);
  dattended = Tensor();
  Tensor dqkv = device_like({tokens, (nq + 2 * nkv) * d});
  ops::cuda::qkv_norm_rope_backward(dq, dk, dv, stash_.qkv, p_.q_norm.value, p_.k_norm.value, eps, inv_freq, batch.positions,
                                    dqkv, p_.q_norm.grad, p_.k_norm.grad);
  dq = dk = dv = Tensor();
  Tensor normed = device_like(stash_.input.shape());  // recomputed, not kept
  ops::cuda::rms_norm_forward(stash_.input, p_.input_norm.value, eps, normed);
  Tensor dnormed = device_like(stash_.input.shape());
  ops::cuda::linear_backward(dqkv, normed, p_.qkv.value, dnormed, p_.qkv.grad, p_.qkv_bias.grad);
  Tensor dh = device_like(stash_.input.shape());
  ops::cuda::rms_norm_backward(dnormed, stash_.input, p_.input_norm.value, eps, dh, p_.input_norm.grad, dout);
  clear_stash();
  return dh;
}

size_t AttentionBlock::stash_bytes() const {
  return held_bytes({&stash_.input, &stash_.qkv, &stash_.q, &stash_.k, &stash_.v, &stash_.attended, &stash_.softmax_stats});
}

}  // namespace moetune::model::cuda
