// A dense SwiGLU (or relu², Nemotron-H) feed-forward sublayer on the GPU: h + swiglu_mlp(rms_norm(h)), or
// OLMo-2's h + rms_norm(swiglu_mlp(h)) (model/cuda/sublayer_norm.h). Keeps h,
// rms_norm(h) and the pre-activation; the activation is recomputed.
#pragma once

#include "moetune/model/block_params.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/cuda/sublayer_norm.h"
#include "moetune/model/model_spec.h"

namespace moetune::model::cuda {

class DenseMlpBlock {
 public:
  DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);
  size_t stash_bytes() const;
  // The gradients its backward pass writes whole on a step's first pass (StepContext::overwrite_gradients).
  std::vector<Tensor> overwritten_gradients() const;
  void clear_stash() {
    input_ = normed_ = gate_up_out_ = activation_ = Tensor();
    out_norm_.clear_stash();
    lora_.clear_stash();
  }

 private:
  const MlpSpec& spec_;
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset (Gemma's 1 + weight norms)
  MlpParams p_;
  SwigluLora lora_;      // LoRA adapters, if any
  OutputNorm out_norm_;  // OLMo-2's norm on down's output, if any
  // normed_, activation_: the norm's output and the activation, where the step keeps them (StepContext::keep_outputs)
  Tensor input_, normed_, gate_up_out_, activation_;
};

}  // namespace moetune::model::cuda
