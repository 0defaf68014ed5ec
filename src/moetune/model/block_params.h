// The parameters each kind of block reads, looked up once by engine name. The CPU reference blocks and the GPU
// blocks (model/cuda/) hold the same ones; optional ones (biases, Qwen3's q/k norms) are undefined Params.
#pragma once

#include <string>

#include "moetune/model/parameter_store.h"

namespace moetune::model {

struct AttentionParams {
  Param input_norm, qkv, qkv_bias, q_norm, k_norm, o, o_bias;
  static AttentionParams lookup(const ParameterStore& store, const std::string& prefix) {
    return {store.get(prefix + "input_norm"), store.get(prefix + "attn.qkv"),    store.find(prefix + "attn.qkv_bias"),
            store.find(prefix + "attn.q_norm"), store.find(prefix + "attn.k_norm"), store.get(prefix + "attn.o"),
            store.find(prefix + "attn.o_bias")};
  }
};

struct MlpParams {
  Param norm, gate_up, gate_up_bias, down, down_bias;
  static MlpParams lookup(const ParameterStore& store, const std::string& prefix) {
    return {store.get(prefix + "post_attn_norm"), store.get(prefix + "mlp.gate_up"), store.find(prefix + "mlp.gate_up_bias"),
            store.get(prefix + "mlp.down"), store.find(prefix + "mlp.down_bias")};
  }
};

struct MoeParams {
  Param norm, router, gate_up, down;
  static MoeParams lookup(const ParameterStore& store, const std::string& prefix) {
    return {store.get(prefix + "post_attn_norm"), store.get(prefix + "moe.router"),
            store.get(prefix + "moe.experts_gate_up"), store.get(prefix + "moe.experts_down")};
  }
};

}  // namespace moetune::model
