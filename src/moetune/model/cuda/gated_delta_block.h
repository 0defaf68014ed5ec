// A Gated DeltaNet sublayer on the GPU (Qwen3-Next's and Qwen3.5's linear_attention layers): h +
// gated_delta_mixer(norm(h)), the input norm scaling by 1 + weight where the sublayer says (Qwen3-Next's). The twin
// of model/gated_delta_block.h: the conv window and the recurrent state restart at every document start and padding
// edge of the step (DeviceBatch::mamba2_rows). Keeps h and the mixer's projection, conv and rule outputs; the normed
// input is recomputed in the backward pass. In generation (a KV cache in the step context) the conv and the rule
// continue from the cache's state instead (gated_delta_mixer_step_gpu).
#pragma once

#include "moetune/model/cuda/gated_delta_mixer_gpu.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/gated_delta_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model::cuda {

class GatedDeltaBlock {
 public:
  GatedDeltaBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  // None: the mixer's gradients are zeroed and added to (StepContext::overwrite_gradients is not read here).
  std::vector<Tensor> overwritten_gradients() const { return {}; }
  void clear_stash() {
    input_ = Tensor();
    stash_ = {};
    in_lora_.clear_stash();
    out_lora_.clear_stash();
  }

 private:
  GatedDeltaGpuAdapters adapters(const StepContext& context) { return {&in_lora_, &out_lora_, context.lora_pass()}; }

  GatedDeltaBlockWeights w_;
  LoraLinear in_lora_, out_lora_;  // LoRA adapters on in_proj's pieces and out_proj, if any
  Tensor input_;                   // h, the norm's input
  GatedDeltaGpuStash stash_;       // without its input (recomputed)
};

}  // namespace moetune::model::cuda
