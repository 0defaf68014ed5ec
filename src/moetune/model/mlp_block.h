// A dense feed-forward sublayer: h + swiglu_mlp(rms_norm(h)) (relu² for Nemotron-H); OLMo-2 places its norm on
// the output instead (model/sublayer_norm.h).
#pragma once

#include "moetune/model/block_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/step_context.h"
#include "moetune/model/sublayer_norm.h"
#include "moetune/model/swiglu_mlp.h"

namespace moetune::model {

class DenseMlpBlock {
 public:
  DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash() {
    input_ = gate_up_out_ = Tensor();
    out_norm_.clear_stash();
    lora_.clear_stash();
  }

 private:
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset (Gemma's 1 + weight norms)
  MlpSpec mlp_;  // its width, activation and gate
  MlpParams p_;
  SwigluLora lora_;  // LoRA adapters, if any
  OutputNorm out_norm_;  // OLMo-2's norm on down's output, if any
  Tensor input_;        // h, the norm's input
  Tensor gate_up_out_;  // the pre-activation [T, 2I]
};

}  // namespace moetune::model
