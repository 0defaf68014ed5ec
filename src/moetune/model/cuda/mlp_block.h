// The dense SwiGLU feed-forward half of a layer on the GPU (Llama, Qwen3, and Qwen3-MoE's dense layers):
// h + down(swiglu(gate_up(rms_norm(h)))). Keeps h and the gate/up pre-activation; the rest is recomputed.
#pragma once

#include "moetune/model/block_params.h"

namespace moetune::model::cuda {

class DenseMlpBlock {
 public:
  DenseMlpBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config);

  Tensor forward(const Tensor& h);
  Tensor backward(const Tensor& dout);
  size_t stash_bytes() const;
  void clear_stash() { input_ = gate_up_out_ = Tensor(); }

 private:
  const io::ModelConfig& config_;
  MlpParams p_;
  Tensor input_, gate_up_out_;
};

}  // namespace moetune::model::cuda
