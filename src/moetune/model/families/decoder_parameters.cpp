#include "moetune/model/families/decoder_parameters.h"

#include <fmt/format.h>

#include <algorithm>

#include "moetune/model/piece_transform.h"
#include "moetune/ops/rope.h"

namespace moetune::model {
namespace {

ParameterSpec whole(std::string name, ParameterRole role, HfTensor piece) {
  return {std::move(name), piece.shape, role, {piece}, "", shape_numel(piece.shape)};
}

// Pieces with equal trailing dimensions (as the engine holds them), concatenated along dim 0.
ParameterSpec concatenated(std::string name, ParameterRole role, std::vector<HfTensor> pieces) {
  Shape shape = engine_shape(pieces[0]);
  shape[0] = 0;
  for (const auto& piece : pieces) shape[0] += engine_shape(piece)[0];
  return {std::move(name), shape, role, std::move(pieces), "", shape_numel(shape)};
}

// A per-expert bias [E, n], split over the expert-parallel ranks like its weights; a token uses k rows of it.
ParameterSpec expert_bias(std::string name, HfTensor piece, int64_t top_k) {
  ParameterSpec spec = whole(std::move(name), ParameterRole::Bias, piece);
  spec.active_numel = top_k * piece.shape[1];
  spec.placement = Placement::ExpertSharded;
  return spec;
}

// Partially rotated heads (parameter_layout.h's PartialRotary) in the first `rotated_rows` rows (0: all); empty
// for whole-head RoPE and for none.
PartialRotary partial_rotary(const AttentionSpec& a, int64_t rotated_rows = 0) {
  if (a.rope.type == "none" || a.mla) return {};
  const int64_t rotary = ops::rope_rotary_dim(a.rope, a.qk_head_dim);
  if (rotary == a.qk_head_dim && !a.rope_interleaved) return {};
  return PartialRotary{a.qk_head_dim, rotary, rotated_rows, a.rope_interleaved};
}

struct Builder {
  const ModelSpec& spec;
  const DecoderTensorNames& tensor_names;
  std::vector<ParameterSpec> out;

  void attention(const AttentionSpec& a, const std::string& hf, const std::string& engine) {
    const int64_t q_rows = a.num_heads * a.qk_head_dim, k_rows = a.num_kv_heads * a.qk_head_dim;
    const int64_t v_rows = a.num_kv_heads * a.v_head_dim, H = spec.hidden_size;
    const std::string attn = hf + "self_attn.";
    // q's and k's rows (and what follows them: biases, norms) in the engine's partial-RoPE order, if partial.
    const auto rotated = [&](std::string name, Shape shape) {
      return HfTensor{std::move(name), std::move(shape), false, false, partial_rotary(a)};
    };
    if (!tensor_names.qkv.empty()) {  // one tensor of q's, k's and v's rows: only q's and k's heads rotate
      const auto qkv = [&](const char* leaf, Shape shape) {
        return HfTensor{attn + tensor_names.qkv + leaf, std::move(shape), false, false,
                        partial_rotary(a, q_rows + k_rows)};
      };
      out.push_back(whole(engine + "attn.qkv", ParameterRole::Matmul, qkv(".weight", {q_rows + k_rows + v_rows, H})));
      if (a.qkv_bias)
        out.push_back(whole(engine + "attn.qkv_bias", ParameterRole::Bias, qkv(".bias", {q_rows + k_rows + v_rows})));
    } else {
      // A gated q_proj (AttentionSpec::output_gate) holds per head its query rows, then its gate rows: the engine
      // keeps every query, then every gate, and only the queries rotate.
      const int64_t q_proj_rows = a.output_gate ? 2 * q_rows : q_rows;
      const auto q_piece = [&](std::string name, Shape shape) {
        HfTensor piece{std::move(name), std::move(shape), false, false, partial_rotary(a, a.output_gate ? q_rows : 0)};
        if (a.output_gate) piece.grouped_rows = {a.num_heads, {a.qk_head_dim, a.qk_head_dim}};
        return piece;
      };
      out.push_back(concatenated(engine + "attn.qkv", ParameterRole::Matmul,
                                 {q_piece(attn + "q_proj.weight", {q_proj_rows, H}),
                                  rotated(attn + "k_proj.weight", {k_rows, H}),
                                  {attn + "v_proj.weight", {v_rows, H}}}));
      if (a.qkv_bias)
        out.push_back(concatenated(engine + "attn.qkv_bias", ParameterRole::Bias,
                                   {q_piece(attn + "q_proj.bias", {q_proj_rows}),
                                    rotated(attn + "k_proj.bias", {k_rows}),
                                    {attn + "v_proj.bias", {v_rows}}}));
    }
    if (a.qk_norm) {
      const int64_t q_width = a.qk_norm_across_heads ? q_rows : a.qk_head_dim;
      const int64_t k_width = a.qk_norm_across_heads ? k_rows : a.qk_head_dim;
      out.push_back(whole(engine + "attn.q_norm", ParameterRole::Norm, rotated(attn + "q_norm.weight", {q_width})));
      out.push_back(whole(engine + "attn.k_norm", ParameterRole::Norm, rotated(attn + "k_norm.weight", {k_width})));
    }
    out.push_back(whole(engine + "attn.o", ParameterRole::Matmul, {attn + "o_proj.weight", {H, a.num_heads * a.v_head_dim}}));
    if (a.o_bias) out.push_back(whole(engine + "attn.o_bias", ParameterRole::Bias, {attn + "o_proj.bias", {H}}));
    if (a.sinks) out.push_back(whole(engine + "attn.sinks", ParameterRole::Bias, {attn + "sinks", {a.num_heads}}));
  }

  // A SwiGLU MLP: gate and up fused into one [2I, H] parameter (one HF tensor too where `fused_gate_up` names it).
  // A relu² MLP (Arcee's up_proj -> relu² -> down_proj) has no gate: its `gate_up` parameter is up_proj alone.
  void mlp(const MlpSpec& m, const std::string& hf, const std::string& engine, const std::string& fused_gate_up = "",
           const std::string& down_name = "down_proj") {
    const int64_t I = m.intermediate, H = spec.hidden_size;
    if (m.activation == Activation::ReluSquared) {
      out.push_back(whole(engine + "gate_up", ParameterRole::Matmul, {hf + "up_proj.weight", {I, H}}));
      if (m.bias) out.push_back(whole(engine + "gate_up_bias", ParameterRole::Bias, {hf + "up_proj.bias", {I}}));
    } else if (!fused_gate_up.empty()) {
      out.push_back(whole(engine + "gate_up", ParameterRole::Matmul, {hf + fused_gate_up + ".weight", {2 * I, H}}));
      if (m.bias)
        out.push_back(whole(engine + "gate_up_bias", ParameterRole::Bias, {hf + fused_gate_up + ".bias", {2 * I}}));
    } else {
      out.push_back(concatenated(engine + "gate_up", ParameterRole::Matmul,
                                 {{hf + "gate_proj.weight", {I, H}}, {hf + "up_proj.weight", {I, H}}}));
      if (m.bias)
        out.push_back(concatenated(engine + "gate_up_bias", ParameterRole::Bias,
                                   {{hf + "gate_proj.bias", {I}}, {hf + "up_proj.bias", {I}}}));
    }
    out.push_back(whole(engine + "down", ParameterRole::Matmul, {hf + down_name + ".weight", {H, I}}));
    if (m.bias) out.push_back(whole(engine + "down_bias", ParameterRole::Bias, {hf + down_name + ".bias", {H}}));
  }

  void moe(const MoeSpec& m, const MoeTensorNames& names, const std::string& layer_hf, const std::string& engine) {
    const int64_t E = m.router.num_experts, I = m.experts.intermediate, H = spec.hidden_size, k = m.router.top_k;
    const std::string hf = layer_hf + names.block + ".", fused = layer_hf + names.fused_block + ".";
    ParameterSpec router = whole(engine + "moe.router", ParameterRole::Router, {hf + names.router + ".weight", {E, H}});
    if (!names.fused_router.empty())
      router.fused_hf_name = fused + names.fused_router + ".weight";
    else if (names.fused_block != names.block)
      router.fused_hf_name = fused + "gate.weight";
    out.push_back(std::move(router));
    if (m.router.bias) out.push_back(whole(engine + "moe.router_bias", ParameterRole::Bias, {hf + names.router + ".bias", {E}}));
    if (m.router.correction_bias) {
      const std::string bias =
          names.correction_bias.empty() ? names.router + ".e_score_correction_bias" : names.correction_bias;
      ParameterSpec buffer = correction_bias_buffer(engine + "moe.router_correction_bias", hf + bias, E);
      if (names.fused_block != names.block)
        buffer.fused_hf_name = fused + bias;    // v5's in-memory name loads too
      else if (!names.correction_bias.empty())  // saved on the block, held by the router in memory (EXAONE-MoE)
        buffer.fused_hf_name = fused + names.router + ".e_score_correction_bias";
      out.push_back(std::move(buffer));
    }
    ParameterSpec gate_up{engine + "moe.experts_gate_up", {E, 2 * I, H}, ParameterRole::Experts, {},
                          fused + "experts.gate_up_proj", k * 2 * I * H};
    ParameterSpec down{engine + "moe.experts_down", {E, H, I}, ParameterRole::Experts, {}, fused + "experts.down_proj", k * H * I};
    if (names.transposed_fused_experts) {
      // One piece each, already holding every expert; the transforms give the engine's [E, 2I, H] / [E, H, I].
      gate_up.fused_hf_name = down.fused_hf_name = "";
      gate_up.pieces.push_back({hf + "experts.gate_up_proj", {E, H, 2 * I}, /*transposed=*/true, /*interleaved_pairs=*/true});
      down.pieces.push_back({hf + "experts.down_proj", {E, I, H}, /*transposed=*/true});
    } else if (!names.stacked_gate_up.empty()) {
      gate_up.pieces.push_back({hf + names.stacked_gate_up, {E, 2 * I, H}});
      down.pieces.push_back({hf + names.stacked_down, {E, H, I}});
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string expert = fmt::format("{}experts.{}.", hf, e);
        gate_up.pieces.push_back({expert + names.gate + ".weight", {I, H}});
        gate_up.pieces.push_back({expert + names.up + ".weight", {I, H}});
        down.pieces.push_back({expert + names.down + ".weight", {H, I}});
      }
    }
    gate_up.placement = down.placement = Placement::ExpertSharded;
    out.push_back(std::move(gate_up));
    if (m.experts.bias)
      out.push_back(expert_bias(engine + "moe.experts_gate_up_bias", {hf + "experts.gate_up_proj_bias", {E, 2 * I}, false, true}, k));
    out.push_back(std::move(down));
    if (m.experts.bias) out.push_back(expert_bias(engine + "moe.experts_down_bias", {hf + "experts.down_proj_bias", {E, H}}, k));
    if (m.shared_expert) {
      mlp(m.shared_expert->mlp, (names.shared_expert_beside_block ? layer_hf : hf) + names.shared_expert + ".",
          engine + "moe.shared_", names.shared_expert_gate_up, names.shared_expert_down);
      if (m.shared_expert->sigmoid_gate)
        out.push_back(whole(engine + "moe.shared_gate", ParameterRole::Matmul, {hf + names.shared_expert_gate + ".weight", {1, H}}));
    }
  }
};

}  // namespace

MoeTensorNames mixtral_tensor_names() {
  MoeTensorNames names;
  names.block = "block_sparse_moe";
  names.gate = "w1";
  names.up = "w3";
  names.down = "w2";
  return names;
}

void append_mamba2_parameters(const Mamba2Spec& m, int64_t hidden_size, const std::string& hf,
                              const std::string& engine, std::vector<ParameterSpec>& out) {
  const int64_t H = hidden_size;
  const auto add = [&](std::string name, ParameterRole role, HfTensor piece) {
    out.push_back(whole(std::move(name), role, std::move(piece)));
  };
  add(engine + "in_proj", ParameterRole::Matmul, {hf + "in_proj.weight", {m.projection(), H}});
  if (m.proj_bias) add(engine + "in_proj_bias", ParameterRole::Bias, {hf + "in_proj.bias", {m.projection()}});
  // The conv and the per-head scalars are not matmuls (no NF4, not in the 6·N FLOPs).
  add(engine + "conv", ParameterRole::Bias, {hf + "conv1d.weight", {m.conv_channels(), 1, m.conv_kernel}});
  if (m.conv_bias) add(engine + "conv_bias", ParameterRole::Bias, {hf + "conv1d.bias", {m.conv_channels()}});
  add(engine + "dt_bias", ParameterRole::Bias, {hf + "dt_bias", {m.num_heads}});
  add(engine + "a_log", ParameterRole::Bias, {hf + "A_log", {m.num_heads}});
  add(engine + "d", ParameterRole::Bias, {hf + "D", {m.num_heads}});
  add(engine + "norm", ParameterRole::Norm, {hf + "norm.weight", {m.inner()}});
  add(engine + "out_proj", ParameterRole::Matmul, {hf + "out_proj.weight", {H, m.inner()}});
  if (m.proj_bias) add(engine + "out_proj_bias", ParameterRole::Bias, {hf + "out_proj.bias", {H}});
}

void append_gated_delta_parameters(const GatedDeltaSpec& g, int64_t hidden_size, const std::string& hf,
                                   const std::string& engine, std::vector<ParameterSpec>& out) {
  const int64_t H = hidden_size, Kd = g.key_dim(), Vd = g.value_dim(), Hv = g.num_v_heads;
  if (g.grouped_projections) {  // Qwen3-Next: per key head [q, k, v, z] and [b, a], its value heads' rows together
    const int64_t share = Hv / g.num_k_heads, Dk = g.k_head_dim, Dv = g.v_head_dim;
    HfTensor qkvz{hf + "in_proj_qkvz.weight", {2 * Kd + 2 * Vd, H}};
    qkvz.grouped_rows = {g.num_k_heads, {Dk, Dk, share * Dv, share * Dv}};
    HfTensor ba{hf + "in_proj_ba.weight", {2 * Hv, H}};
    ba.grouped_rows = {g.num_k_heads, {share, share}};
    out.push_back(concatenated(engine + "in_proj", ParameterRole::Matmul, {qkvz, ba}));
  } else {  // Qwen3.5: the engine's order already
    out.push_back(concatenated(engine + "in_proj", ParameterRole::Matmul,
                               {{hf + "in_proj_qkv.weight", {2 * Kd + Vd, H}},
                                {hf + "in_proj_z.weight", {Vd, H}},
                                {hf + "in_proj_b.weight", {Hv, H}},
                                {hf + "in_proj_a.weight", {Hv, H}}}));
  }
  // The conv and the per-head scalars are not matmuls (no NF4, not in the 6·N FLOPs).
  out.push_back(
      whole(engine + "conv", ParameterRole::Bias, {hf + "conv1d.weight", {g.conv_channels(), 1, g.conv_kernel}}));
  out.push_back(whole(engine + "dt_bias", ParameterRole::Bias, {hf + "dt_bias", {Hv}}));
  out.push_back(whole(engine + "a_log", ParameterRole::Bias, {hf + "A_log", {Hv}}));
  out.push_back(whole(engine + "norm", ParameterRole::Norm, {hf + "norm.weight", {g.v_head_dim}}));
  out.push_back(whole(engine + "out_proj", ParameterRole::Matmul, {hf + "out_proj.weight", {H, Vd}}));
}

ParameterSpec correction_bias_buffer(std::string engine_name, std::string hf_name, int64_t experts) {
  ParameterSpec bias = whole(std::move(engine_name), ParameterRole::Buffer, {std::move(hf_name), {experts}});
  bias.trainable = false;
  bias.active_numel = 0;
  return bias;
}

std::vector<ParameterSpec> decoder_parameters(const ModelSpec& spec, const MoeTensorNames& moe_names,
                                              const DecoderTensorNames& names) {
  Builder b{spec, names, {}};
  const int64_t H = spec.hidden_size;
  b.out.push_back(whole("embed_tokens", ParameterRole::Embedding, {"model.embed_tokens.weight", {spec.vocab_size, H}}));
  // Llama's names for the norms before attention and before the MLP; where a layer norms its sublayers' outputs
  // (OLMo-2), post_attention_layernorm names the one after attention, as OLMo-2's and Gemma's checkpoints do
  // (DecoderTensorNames::out_normed_inputs / out_norms; GLM-4 names them otherwise).
  const char* hf_norm_names[] = {"input_layernorm", "post_attention_layernorm"};

  for (int64_t layer = 0; layer < spec.num_layers(); ++layer) {
    const std::string hf = fmt::format("model.layers.{}.", layer), engine = fmt::format("layers.{}.", layer);
    const auto& sublayers = spec.layers[size_t(layer)].sublayers;
    const bool out_norms =
        std::any_of(sublayers.begin(), sublayers.end(), [](const SublayerSpec& s) { return !s.out_norm.empty(); });
    for (size_t i = 0; i < sublayers.size(); ++i) {
      const SublayerSpec& sublayer = sublayers[i];
      const std::string hf_norm = out_norms ? names.out_normed_inputs[i] : hf_norm_names[i];
      if (!sublayer.norm.empty())
        b.out.push_back(whole(engine + sublayer.norm, ParameterRole::Norm, {hf + hf_norm + ".weight", {H}}));
      if (const AttentionSpec* a = sublayer.attention()) b.attention(*a, hf, engine);
      if (const MlpSpec* m = sublayer.mlp())
        b.mlp(*m, hf + names.mlp + ".", engine + "mlp.", names.gate_up, names.down);
      if (const Mamba2Spec* m = sublayer.mamba2())
        append_mamba2_parameters(*m, H, hf + "mamba.", engine + "mamba.", b.out);
      if (const GatedDeltaSpec* g = sublayer.gated_delta())
        append_gated_delta_parameters(*g, H, hf + "linear_attn.", engine + "delta.", b.out);
      if (const MoeSpec* m = sublayer.moe()) b.moe(*m, moe_names, hf, engine);
      if (!sublayer.out_norm.empty())
        b.out.push_back(
            whole(engine + sublayer.out_norm, ParameterRole::Norm, {hf + names.out_norms[i] + ".weight", {H}}));
    }
  }
  b.out.push_back(whole("final_norm", ParameterRole::Norm, {"model.norm.weight", {H}}));
  if (!spec.tie_word_embeddings)
    b.out.push_back(whole("lm_head", ParameterRole::LmHead, {"lm_head.weight", {spec.vocab_size, H}}));
  return b.out;
}

std::vector<ParameterSpec> standard_decoder_parameters(const ModelSpec& spec) { return decoder_parameters(spec, {}); }

}  // namespace moetune::model
