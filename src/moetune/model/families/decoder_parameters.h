// The parameter builders the decoder families share: embedding, per-layer sublayers, final norm and LM head,
// each engine parameter listing the HF tensors it is made of. A family passes the HF names that differ.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// Where a family keeps its MoE tensors under model.layers.N.
struct MoeTensorNames {
  std::string block = "mlp";                                    // the MoE module
  std::string router = "gate";                                  // <block>.<router>.weight
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // <block>.experts.E.<gate>.weight
  // transformers v5's fused experts (<fused_block>.experts.gate_up_proj / down_proj) and router, which a
  // checkpoint may hold instead of the per-expert tensors.
  std::string fused_block = "mlp";
  std::string shared_expert = "shared_expert", shared_expert_gate = "shared_expert_gate";
  // The router's e_score_correction_bias under <block>: "<router>.e_score_correction_bias" when empty (DeepSeek-V3);
  // MiniMax-M2 and EXAONE-MoE save it on the block itself ("e_score_correction_bias").
  std::string correction_bias;
  // GPT-OSS: the experts exist only fused and transposed, <block>.experts.gate_up_proj [E, H, 2I] with gate and
  // up interleaved and <block>.experts.down_proj [E, I, H] (biases <name>_bias); no per-expert tensors.
  bool transposed_fused_experts = false;
  // Granite: every expert's gate and up stacked in one tensor, <block>.<stacked_gate_up> [E, 2I, H] (GraniteMoe's
  // input_linear.weight; GraniteMoeSWA saves v5's experts.gate_up_proj itself), and the down projections in
  // <block>.<stacked_down> [E, H, I] (v5's fused layout; v5's names load too); empty: per-expert tensors.
  std::string stacked_gate_up, stacked_down;
  // The router's module in transformers' in-memory model where the checkpoint's differs (Granite's router for
  // router.layer), loaded too as <fused_block>.<this>.weight; empty: <fused_block>.gate where fused_block differs.
  std::string fused_router;
  // The shared expert's module beside <block> under the layer instead of inside it (Granite's shared_mlp), its gate
  // and up in one tensor where shared_expert_gate_up names it (Granite's input_linear), its down projection's name.
  bool shared_expert_beside_block = false;
  std::string shared_expert_gate_up, shared_expert_down = "down_proj";
};

// Where a family keeps its attention's, dense MLP's and norms' tensors when they differ from Llama's.
struct DecoderTensorNames {
  // q/k/v, or a dense MLP's gate/up, as one HF tensor (Phi-3's self_attn.qkv_proj [q; k; v] and mlp.gate_up_proj
  // [gate; up]): the engine's fused attn.qkv / gate_up parameter is then that one piece (and its bias
  // `<name>.bias`). Empty: the separate q_proj, k_proj, v_proj and gate_proj, up_proj.
  std::string qkv, gate_up;
  // A dense MLP's module and its down projection (Granite 4.0's shared_mlp.output_linear on its dense layers).
  std::string mlp = "mlp", down = "down_proj";
  // Where a layer norms its sublayers' outputs (SublayerSpec::out_norm), the input norms' and the output norms' names
  // for its two sublayers: Gemma's and OLMo-2's by default, GLM-4's {input_layernorm, post_attention_layernorm} /
  // {post_self_attn_layernorm, post_mlp_layernorm}.
  std::string out_normed_inputs[2] = {"input_layernorm", "pre_feedforward_layernorm"};
  std::string out_norms[2] = {"post_attention_layernorm", "post_feedforward_layernorm"};
};

// Mixtral's checkpoint names (block_sparse_moe, the experts' w1 / w3 / w2 for gate / up / down), which MiniMax-M2
// keeps too.
MoeTensorNames mixtral_tensor_names();

// A router's e_score_correction_bias (DeepSeek-V3's router and those that copy it): read for the choice only, a
// buffer transformers neither trains nor counts as a parameter (frozen, role Buffer, no active elements).
ParameterSpec correction_bias_buffer(std::string engine_name, std::string hf_name, int64_t experts);

// A Mamba2 mixer's tensors under `hf` (in_proj, conv1d [C, 1, K], dt_bias, A_log, D, norm, out_proj), as the engine's
// `engine` + in_proj, conv, dt_bias, a_log, d, norm, out_proj (model/mamba2_params.h), appended to `out`.
void append_mamba2_parameters(const Mamba2Spec& m, int64_t hidden_size, const std::string& hf,
                              const std::string& engine, std::vector<ParameterSpec>& out);

// A Gated DeltaNet's tensors under `hf` (Qwen3-Next's in_proj_qkvz and in_proj_ba, or Qwen3.5's in_proj_qkv, _z, _b
// and _a; conv1d [C, 1, K], dt_bias, A_log, norm, out_proj), as the engine's `engine` + in_proj ([q | k | v | z | b |
// a] rows), conv, dt_bias, a_log, norm, out_proj (model/gated_delta_params.h), appended to `out`.
void append_gated_delta_parameters(const GatedDeltaSpec& g, int64_t hidden_size, const std::string& hf,
                                   const std::string& engine, std::vector<ParameterSpec>& out);

// Everything for the usual decoder: model.embed_tokens, model.layers.N.{input_layernorm, self_attn or mamba,
// post_attention_layernorm, mlp}, model.norm, lm_head (unless tied).
std::vector<ParameterSpec> decoder_parameters(const ModelSpec& spec, const MoeTensorNames& moe_names,
                                              const DecoderTensorNames& names = {});
// The same with the usual names (Llama, Qwen): a Family's `parameters` as it stands.
std::vector<ParameterSpec> standard_decoder_parameters(const ModelSpec& spec);

}  // namespace moetune::model
