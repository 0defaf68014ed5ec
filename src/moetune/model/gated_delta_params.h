// A Gated DeltaNet sublayer's parameters ("layers.N.delta.*"), looked up once by engine name, and read as the
// mixer's weights and gradients (model/gated_delta_mixer.h's GatedDeltaWeights). conv1d's weight is kept in its HF
// shape [C, 1, K] and read as [C, K].
#pragma once

#include <string>

#include "moetune/model/gated_delta_mixer.h"
#include "moetune/model/parameter_store.h"

namespace moetune::model {

struct GatedDeltaSublayerParams {
  Param in_proj, conv, dt_bias, a_log, norm, out_proj;

  static GatedDeltaSublayerParams lookup(const ParameterStore& store, const std::string& layer) {
    const std::string d = layer + "delta.";
    return {store.get(d + "in_proj"), store.get(d + "conv"), store.get(d + "dt_bias"),
            store.get(d + "a_log"),   store.get(d + "norm"), store.get(d + "out_proj")};
  }

  GatedDeltaWeights values() const {
    return {in_proj.value, conv_matrix(conv.value), dt_bias.value, a_log.value, norm.value, out_proj.value};
  }
  // Undefined where frozen.
  GatedDeltaWeights gradients() const {
    return {in_proj.grad, conv_matrix(conv.grad), dt_bias.grad, a_log.grad, norm.grad, out_proj.grad};
  }

 private:
  static Tensor conv_matrix(const Tensor& conv) {
    return conv.defined() ? conv.view({conv.size(0), conv.size(2)}) : conv;
  }
};

// What a Gated DeltaNet block holds of its sublayer: the spec, the pre-norm (with the sublayer's weight offset), the
// mixer's weights and their gradients.
struct GatedDeltaBlockWeights {
  const GatedDeltaSpec& spec;
  double eps;
  float norm_offset;  // SublayerSpec::norm_weight_offset: Qwen3-Next's input norm scales by 1 + weight
  Param norm;
  GatedDeltaWeights values, grads;

  GatedDeltaBlockWeights(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                         double norm_eps)
      : spec(*sublayer.gated_delta()),
        eps(norm_eps),
        norm_offset(sublayer.norm_weight_offset),
        norm(store.get(layer + sublayer.norm)) {
    const GatedDeltaSublayerParams p = GatedDeltaSublayerParams::lookup(store, layer);
    values = p.values();
    grads = p.gradients();
  }
};

}  // namespace moetune::model
