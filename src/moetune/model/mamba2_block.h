// A Mamba2 sublayer on the CPU (Nemotron-H's linear_attention layers): h + mamba2_mixer(rms_norm(h)), the mixer
// being model/mamba2_mixer.h's composition of the ops. The conv window and the scan's state restart at every
// document start and padding edge of the step's sequence layout. In a cached decode step (generate) the conv and
// the scan continue from its state in the KvCache (mamba2_mixer_step).
#pragma once

#include "moetune/model/mamba2_mixer.h"
#include "moetune/model/mamba2_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"
#include "moetune/model/step_context.h"

namespace moetune::model {

class Mamba2Block {
 public:
  Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash() {
    input_ = Tensor();
    stash_ = {};
  }

 private:
  Tensor residual_add(const Tensor& h, const Tensor& mixed) const;  // h + residual_scale · mixed

  Mamba2BlockWeights w_;
  Tensor input_;  // h, the norm's input
  Mamba2Stash stash_;
};

}  // namespace moetune::model
