// A Gated DeltaNet sublayer on the CPU (Qwen3-Next's linear_attention layers): h + gated_delta_mixer(norm(h)), the
// input norm scaling by 1 + weight where the sublayer says (Qwen3-Next's). The conv window and the recurrent state
// restart at every document start and padding edge of the step's sequence layout. In a cached decode step
// (generate) the conv and the rule continue from the sublayer's state in the KvCache (gated_delta_mixer_step).
#pragma once

#include "moetune/model/gated_delta_mixer.h"
#include "moetune/model/gated_delta_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"
#include "moetune/model/step_context.h"

namespace moetune::model {

class GatedDeltaBlock {
 public:
  GatedDeltaBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash() {
    input_ = Tensor();
    stash_ = {};
    in_lora_.clear_stash();
    out_lora_.clear_stash();
  }

 private:
  GatedDeltaAdapters adapters(const StepContext& context);

  GatedDeltaBlockWeights w_;
  LoraLinear in_lora_, out_lora_;  // LoRA adapters on in_proj's pieces and out_proj, if any
  Tensor input_;  // h, the norm's input
  GatedDeltaStash stash_;
};

}  // namespace moetune::model
