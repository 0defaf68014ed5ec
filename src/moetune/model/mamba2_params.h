// A Mamba2 sublayer's parameters ("layers.N.mamba.*"), looked up once by engine name, and read as the mixer's
// weights and gradients (model/mamba2_mixer.h's Mamba2Weights): the CPU block and the GPU block hold the same
// ones (Mamba2BlockWeights). conv1d's weight is kept in its HF shape [C, 1, K] and read as [C, K].
#pragma once

#include <string>

#include "moetune/model/lora_refusal.h"
#include "moetune/model/mamba2_mixer.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model {

struct Mamba2Params {
  Param in_proj, in_proj_bias, conv, conv_bias, dt_bias, a_log, d, norm, out_proj, out_proj_bias;

  static Mamba2Params lookup(const ParameterStore& store, const std::string& layer) {
    const std::string m = layer + "mamba.";
    return {store.get(m + "in_proj"), store.find(m + "in_proj_bias"), store.get(m + "conv"), store.find(m + "conv_bias"),
            store.get(m + "dt_bias"), store.get(m + "a_log"),         store.get(m + "d"),    store.get(m + "norm"),
            store.get(m + "out_proj"), store.find(m + "out_proj_bias")};
  }

  Mamba2Weights values() const {
    return {in_proj.value, in_proj_bias.value, conv_matrix(conv.value), conv_bias.value, dt_bias.value,
            a_log.value,   d.value,            norm.value,              out_proj.value,  out_proj_bias.value};
  }
  // Undefined where a parameter is absent or frozen.
  Mamba2Weights gradients() const {
    return {in_proj.grad, in_proj_bias.grad, conv_matrix(conv.grad), conv_bias.grad, dt_bias.grad,
            a_log.grad,   d.grad,            norm.grad,              out_proj.grad,  out_proj_bias.grad};
  }

 private:
  static Tensor conv_matrix(const Tensor& conv) { return conv.defined() ? conv.view({conv.size(0), conv.size(2)}) : conv; }
};

// What a Mamba2 block holds of its sublayer, on either device: the spec, the pre-norm, the mixer's weights and
// their gradients (undefined where absent or frozen). Checks the biases against the spec and refuses LoRA on the
// projections, which neither block runs.
struct Mamba2BlockWeights {
  const Mamba2Spec& spec;
  double eps;
  double residual_scale;  // SublayerSpec::residual_scale: h + residual_scale · mixer(norm(h))
  Param norm;
  Mamba2Weights values, grads;

  Mamba2BlockWeights(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                     double norm_eps)
      : spec(*sublayer.mamba2()),
        eps(norm_eps),
        residual_scale(sublayer.residual_scale),
        norm(store.get(layer + sublayer.norm)) {
    const Mamba2Params p = Mamba2Params::lookup(store, layer);
    MOETUNE_CHECK(spec.proj_bias == p.in_proj_bias.defined() && spec.conv_bias == p.conv_bias.defined(),
                  "{}: the spec and the parameters disagree on the Mamba2 biases", layer);
    refuse_lora_on(store, layer, {"mamba.in_proj", "mamba.out_proj"}, "Mamba2 projections", "in_proj / out_proj");
    values = p.values();
    grads = p.gradients();
  }
};

}  // namespace moetune::model
