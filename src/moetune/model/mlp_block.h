// The dense feed-forward half of a decoder layer: h + down(swiglu(gate_up(rms_norm(h)))).
#pragma once

#include "moetune/model/block_params.h"

namespace moetune::model {

class DenseMlpBlock {
 public:
  DenseMlpBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config);

  Tensor forward(const Tensor& h);
  Tensor backward(const Tensor& dout);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash() { input_ = gate_up_out_ = Tensor(); }

 private:
  const io::ModelConfig& config_;
  MlpParams p_;
  Tensor input_;        // h, the norm's input
  Tensor gate_up_out_;  // the pre-activation [T, 2I]
};

}  // namespace moetune::model
