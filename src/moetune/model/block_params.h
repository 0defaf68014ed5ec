// The parameters each kind of block reads, looked up once by engine name. The CPU reference blocks and the GPU
// blocks (model/cuda/) hold the same ones; optional ones (biases, Qwen3's q/k norms, a shared expert) are
// undefined Params. `layer` is the layer's prefix ("layers.3."), `norm` the sublayer's norm name (empty: no norm,
// an undefined Param).
#pragma once

#include <string>

#include "moetune/model/parameter_store.h"

namespace moetune::model {

// The sublayer's pre-norm: undefined where it has none (SublayerSpec::norm empty).
inline Param sublayer_norm(const ParameterStore& store, const std::string& layer, const std::string& norm) {
  return norm.empty() ? Param{} : store.get(layer + norm);
}

struct AttentionParams {
  Param norm, qkv, qkv_bias, q_norm, k_norm, o, o_bias;
  Param sinks;  // [nq], GPT-OSS
  static AttentionParams lookup(const ParameterStore& store, const std::string& layer, const std::string& norm) {
    return {sublayer_norm(store, layer, norm), store.get(layer + "attn.qkv"),     store.find(layer + "attn.qkv_bias"),
            store.find(layer + "attn.q_norm"), store.find(layer + "attn.k_norm"), store.get(layer + "attn.o"),
            store.find(layer + "attn.o_bias"), store.find(layer + "attn.sinks")};
  }
};

// A SwiGLU MLP's weights: the dense MLP ("layers.3.mlp.") and a shared expert ("layers.3.moe.shared_").
struct SwigluParams {
  Param gate_up, gate_up_bias, down, down_bias;
  static SwigluParams lookup(const ParameterStore& store, const std::string& prefix) {
    return {store.get(prefix + "gate_up"), store.find(prefix + "gate_up_bias"), store.get(prefix + "down"),
            store.find(prefix + "down_bias")};
  }
  bool defined() const { return gate_up.defined(); }
};

struct MlpParams {
  Param norm;
  SwigluParams mlp;
  static MlpParams lookup(const ParameterStore& store, const std::string& layer, const std::string& norm) {
    return {sublayer_norm(store, layer, norm), SwigluParams::lookup(store, layer + "mlp.")};
  }
};

struct MoeParams {
  Param norm, router, gate_up, down;
  SwigluParams shared;  // undefined without a shared expert
  Param shared_gate;    // [1, H]; undefined without its sigmoid gate
  Param router_bias;                  // [E], GPT-OSS
  Param gate_up_bias, down_bias;      // [E, 2I], [E, H], GPT-OSS
  // Nemotron-H's latent MoE: into the experts' width D [D, H] and back [H, D], biases optional; else undefined.
  Param latent_in, latent_in_bias, latent_out, latent_out_bias;
  static MoeParams lookup(const ParameterStore& store, const std::string& layer, const std::string& norm,
                          bool shared_expert) {
    return {sublayer_norm(store, layer, norm),
            store.get(layer + "moe.router"),
            store.get(layer + "moe.experts_gate_up"),
            store.get(layer + "moe.experts_down"),
            shared_expert ? SwigluParams::lookup(store, layer + "moe.shared_") : SwigluParams{},
            store.find(layer + "moe.shared_gate"),
            store.find(layer + "moe.router_bias"),
            store.find(layer + "moe.experts_gate_up_bias"),
            store.find(layer + "moe.experts_down_bias"),
            store.find(layer + "moe.latent_in"),
            store.find(layer + "moe.latent_in_bias"),
            store.find(layer + "moe.latent_out"),
            store.find(layer + "moe.latent_out_bias")};
  }
};

}  // namespace moetune::model
