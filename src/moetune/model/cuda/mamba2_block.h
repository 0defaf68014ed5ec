// A Mamba2 sublayer on the GPU (Nemotron-H's linear_attention layers): h + mamba2_mixer(rms_norm(h)), the mixer
// being model/cuda/mamba2_mixer_gpu.h. The twin of model/mamba2_block.h: the conv window and the scan's state
// restart at every document start and padding edge of the step (DeviceBatch::mamba2_rows). Keeps h and the
// mixer's projection, conv and scan outputs; the normed input is recomputed in the backward pass. In generation
// (a KV cache in the step context) the conv and scan continue from the cache's state instead
// (mamba2_mixer_step_gpu).
#pragma once

#include "moetune/model/cuda/mamba2_mixer_gpu.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/mamba2_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model::cuda {

class Mamba2Block {
 public:
  Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  // None: the mixer's gradients are zeroed and added to (StepContext::overwrite_gradients is not read here).
  std::vector<Tensor> overwritten_gradients() const { return {}; }
  void clear_stash() {
    input_ = Tensor();
    stash_ = {};
  }

 private:
  Mamba2BlockWeights w_;
  Tensor input_;          // h, the norm's input
  Mamba2GpuStash stash_;  // without its input (recomputed)
};

}  // namespace moetune::model::cuda
