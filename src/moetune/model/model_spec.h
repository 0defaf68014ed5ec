// The architecture as data: one typed, family-neutral description of a decoder-only model, built once from
// config.json by the model's family (model/families/). Every block reads only its own part (AttentionSpec,
// MlpSpec, MoeSpec); the CPU and GPU models, `inspect`, the parameter layout and the memory plan all walk the
// same list of layers.
//
// A field describes what the architecture *is*. Where a field holds a value the engine does not run yet
// (sigmoid routers, ...), the family refuses the config naming the key, so nothing is silently trained
// differently from transformers; what only the CPU runs (some routers; in generation, latent attention's and
// Mamba2's caches) the GPU model refuses by name (model/device_support.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "moetune/core/dtype.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/gated_delta_rule.h"
#include "moetune/ops/mamba2.h"
#include "moetune/ops/rope.h"

namespace moetune::model {

// DeepSeek-V3's multi-head latent attention (model/mla_attention_block.h): q through a low-rank bottleneck
// (or one projection), k and v expanded per head from a shared compressed latent, one shared RoPE key.
// qk_head_dim = qk_nope_head_dim + qk_rope_head_dim; only the rope part is rotated.
struct MlaSpec {
  std::optional<int64_t> q_lora_rank;  // nullopt: q_proj straight from the hidden state
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0;
  bool rope_interleave = true;         // rotary pairs (x0, x1), (x2, x3), ... instead of the two halves
  bool bias = false;                   // attention_bias: on q_a_proj, kv_a_proj_with_mqa and o_proj
  double latent_norm_eps = 1e-6;       // q_a_layernorm / kv_a_layernorm keep RMSNorm's default eps
  // The rope part's schedule is AttentionSpec::rope (default or yarn) over qk_rope_head_dim.
  double rope_scale = 1.0;             // YaRN's attention factor (ops::rope_attention_scaling), multiplying cos and sin
  double softmax_scale = 0;            // qk_head_dim^-0.5, times YaRN's mscale(mscale_all_dim)^2
};

struct AttentionSpec {
  int64_t num_heads = 0, num_kv_heads = 0;
  int64_t qk_head_dim = 0, v_head_dim = 0;  // equal for every family so far; MLA will differ
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;                     // RMSNorm over head_dim on q and k before RoPE (Qwen3)
  // With qk_norm: one RMSNorm over all of q's heads at once (weight [heads · head_dim]), and one over k's, as OLMoE
  // and MiniMax-M2 norm their q_proj / k_proj outputs before splitting the heads.
  bool qk_norm_across_heads = false;
  std::optional<int64_t> sliding_window;    // sliding_attention layers: keys t - window + 1 .. t (GPT-OSS, Qwen, Mixtral)
  bool sinks = false;                       // a learned per-head softmax sink, GPT-OSS
  ops::RopeSpec rope;                       // type "none": no positional embedding at all (Nemotron-H)
  std::optional<MlaSpec> mla;               // DeepSeek-V3: multi-head latent attention instead of q/k/v
  double query_pre_attn_scalar = 0;         // Gemma: the softmax scale's denominator instead of qk_head_dim (0: none)
  // ERNIE 4.5: RoPE rotates the pairs (x0, x1), (x2, x3), ... of each q/k head instead of its two halves. The
  // engine keeps q's and k's rows (their biases and norms too) reordered to halves on load and back on save
  // (parameter_layout.h's PartialRotary::interleaved): q·k is the same sum in any common order of a head's
  // dimensions, so its one rotate-half RoPE then rotates exactly the checkpoint's pairs.
  bool rope_interleaved = false;
  // Granite's attention_multiplier: the softmax scale itself, in place of 1 / sqrt(qk_head_dim).
  std::optional<double> scaling;
  // Qwen3-Next's gated attention: q_proj gives each head its query and then as many gate rows, and the attention's
  // output is multiplied by sigmoid(gate) before o_proj. The engine keeps the gate rows after all the queries
  // ([q | gate | k | v] in attn.qkv; HfTensor::grouped_rows reorders them on load and back on save).
  bool output_gate = false;
  double softmax_scale() const;  // scaling, else 1 / sqrt(query_pre_attn_scalar, else qk_head_dim)
};

// ClampedSwiGLU: GPT-OSS's experts, with `MlpSpec::clamp`'s constants.
// ReluSquared: Nemotron-H's MLPs and experts, down(relu(up x)²) with no gate: the first projection (the engine's
// `gate_up` parameter) holds up alone, [I, H] instead of [2I, H].
enum class Activation { SwiGLU, ClampedSwiGLU, ReluSquared };

struct MlpSpec {
  int64_t intermediate = 0;
  bool bias = false;
  Activation activation = Activation::SwiGLU;
  ops::SwigluClamp clamp;  // read only for ClampedSwiGLU
  // Activation::SwiGLU's gate function (transformers' hidden_act): f(gate) ⊙ up; silu for SwiGLU proper.
  ops::GateFunction gate = ops::GateFunction::Silu;
  bool silu_gated() const { return activation == Activation::SwiGLU && gate == ops::GateFunction::Silu; }
  // The rows of the first projection: gate and up (2I), or up alone (I) for relu².
  int64_t first_projection() const { return activation == Activation::ReluSquared ? intermediate : 2 * intermediate; }
};

enum class RouterScore { Softmax, Sigmoid };

struct RouterSpec {
  int64_t num_experts = 0, top_k = 0;
  RouterScore score = RouterScore::Softmax;
  bool topk_before_softmax = false;  // GPT-OSS: top-k over the logits, softmax over the k chosen
  int64_t num_groups = 1, topk_groups = 1;
  bool correction_bias = false;      // DeepSeek-V3's e_score_correction_bias
  bool renormalize = false;          // norm_topk_prob
  bool bias = false;
  double scaling_factor = 1.0;

  // Softmax over all experts, then top-k (optionally renormalised), with DeepSeek-V2's group limit (groups scored by
  // their best expert) and scaling_factor where set, or ERNIE 4.5's choice by p + correction_bias (one group).
  bool is_softmax_then_grouped_topk() const;
  // GPT-OSS: top-k of the logits (with or without a bias), softmax over the k chosen; the CPU runs it too.
  bool is_topk_then_softmax() const;
};

struct SharedExpertSpec {
  MlpSpec mlp;
  bool sigmoid_gate = false;  // Qwen2-MoE: output += sigmoid(x · gate) · shared(x)
};

struct MoeSpec {
  RouterSpec router;
  MlpSpec experts;  // each expert's width, activation and biases
  std::optional<SharedExpertSpec> shared_expert;
  // Nemotron-H's latent MoE (moe_latent_size): the routed experts run in this width, between a projection into
  // it (`moe.latent_in`) and one back (`moe.latent_out`); the router and the shared expert read the hidden state.
  std::optional<int64_t> latent_size;
  int64_t expert_width(int64_t hidden_size) const { return latent_size.value_or(hidden_size); }
};

// Nemotron-H's Mamba2 mixer (model/mamba2_mixer.h): in_proj to [z | xBC | dt], causal depthwise conv + SiLU over
// xBC, the selective scan with num_groups groups of B and C, the gated RMSNorm per group, out_proj.
struct Mamba2Spec {
  int64_t num_heads = 0, head_dim = 0, num_groups = 1, state_size = 0, conv_kernel = 4;
  bool conv_bias = true;    // use_conv_bias
  bool proj_bias = false;   // use_bias: in_proj and out_proj
  double dt_min = 0, dt_max = INFINITY;
  double norm_eps = 1e-5;   // layer_norm_epsilon, the gated norm's too
  int64_t chunk_size = 128; // the chunked (SSD) scan's block; the CPU recurrence does not need it
  // The gated RMSNorm's statistics per B/C group (Nemotron-H's group_size = inner / n_groups), or over the whole
  // width (Granite 4.0's GraniteMoeHybridRMSNormGated).
  bool norm_per_group = true;

  int64_t inner() const { return num_heads * head_dim; }
  int64_t norm_group_size() const { return norm_per_group ? inner() / num_groups : inner(); }
  int64_t conv_channels() const { return inner() + 2 * num_groups * state_size; }
  int64_t projection() const { return inner() + conv_channels() + num_heads; }  // in_proj's rows
  ops::Mamba2Scan scan() const { return {num_heads, head_dim, num_groups, state_size, dt_min, dt_max}; }
};

// Qwen3-Next's Gated DeltaNet (model/gated_delta_mixer.h): in_proj to [q | k | v | z | b | a] (the engine's order;
// Qwen3-Next's in_proj_qkvz / in_proj_ba group them per key head on disk, Qwen3.5's four projections do not),
// causal depthwise conv + activation over [q | k | v], the gated delta rule (ops/gated_delta_rule.h) with value
// heads sharing key heads as GQA does, the norm-then-gate RMSNorm per value head with z, out_proj.
struct GatedDeltaSpec {
  int64_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 4;
  double norm_eps = 1e-6;  // rms_norm_eps, the gated norm's
  // Qwen3-Next's two fused projections, grouped per key head, or Qwen3.5's four (in_proj_qkv, _z, _b, _a).
  bool grouped_projections = true;

  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
  int64_t projection() const { return conv_channels() + value_dim() + 2 * num_v_heads; }  // in_proj's rows
  ops::GatedDeltaShape shape() const { return {num_k_heads, num_v_heads, k_head_dim, v_head_dim}; }
};

// A residual sublayer: h + mixer(rms_norm(h)). `name` is the engine's prefix for its parameters ("attn", "mlp",
// "moe", "mamba"); `norm` the engine name of its RMSNorm weight, empty where the mixer reads h itself (OLMo-2);
// `out_norm`, where set, the engine name of an RMSNorm on the mixer's output before the residual add:
// h + out_norm(mixer(...)) (OLMo-2's post-norms; attention and dense MLP sublayers only, validate_decoder says).
struct SublayerSpec {
  std::string norm;
  std::variant<AttentionSpec, MlpSpec, MoeSpec, Mamba2Spec, GatedDeltaSpec> mixer;
  std::string out_norm;
  // Gemma, Qwen3-Next: every RMSNorm of the sublayer (norm, out_norm, attention's q/k norms) scales by 1 + weight,
  // its weight stored as the offset from 1 (ops/norm.h's weight_offset); 0 elsewhere. Not a Gated DeltaNet's own
  // gated norm (plain weight). Not latent attention or Mamba2 sublayers (validate_decoder says).
  float norm_weight_offset = 0.0f;
  // Granite's residual_multiplier: h + residual_scale · out_norm(mixer(...)). Attention (not latent), dense MLP and
  // MoE sublayers only, validate_decoder says.
  double residual_scale = 1.0;

  const AttentionSpec* attention() const { return std::get_if<AttentionSpec>(&mixer); }
  const MlpSpec* mlp() const { return std::get_if<MlpSpec>(&mixer); }
  const MoeSpec* moe() const { return std::get_if<MoeSpec>(&mixer); }
  const Mamba2Spec* mamba2() const { return std::get_if<Mamba2Spec>(&mixer); }
  const GatedDeltaSpec* gated_delta() const { return std::get_if<GatedDeltaSpec>(&mixer); }
};

struct LayerSpec {
  std::vector<SublayerSpec> sublayers;
  const MoeSpec* moe() const;  // the layer's MoE mixer, if it has one
};

// The load-balancing loss is computed over all MoE layers at once (transformers concatenates their router
// logits), so it is a property of the model, not of a layer.
enum class AuxLoss { None, LoadBalancing };

struct ModelSpec {
  std::string family;        // "qwen3_moe", the family's model_type
  std::string architecture;  // "Qwen3MoeForCausalLM"
  int64_t vocab_size = 0, hidden_size = 0, max_position_embeddings = 0;
  double norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // Gemma: the final norm's weight offset (as SublayerSpec::norm_weight_offset), and the factor the embedding's
  // rows are multiplied by after the lookup (sqrt(hidden_size), rounded to the activations' dtype as transformers
  // rounds its embed_scale buffer to the weight's); a tied LM head reads the unscaled weight.
  float final_norm_weight_offset = 0.0f;
  double embedding_scale = 1.0;
  // Whether embedding_scale is rounded to the activations' dtype first (Gemma's bf16 embed_scale buffer) or
  // multiplies as the number it is (Granite's embedding_multiplier, a Python float in transformers).
  bool embedding_scale_in_activation_dtype = true;
  // Granite's logits_scaling: the LM head's logits are divided by it before the softmax (and in generation).
  double logits_divisor = 1.0;
  std::vector<LayerSpec> layers;
  // The family's released files may carry multi-token-prediction tensors named mtp.* (Nemotron-H), which the model
  // does not run: loading skips them and saving does not write them. (Layers past num_hidden_layers, DeepSeek-V3's
  // MTP module among them, are skipped in every family, with a note: model/checkpoint.cpp.)
  bool carries_mtp_layers = false;
  // Where the checkpoint keeps the language model's tensors. A ForCausalLM names them model.* and lm_head.*; a
  // vision-language checkpoint trained on its text alone (model/families/text_of_multimodal.h) names them under
  // its language model, and holds tensors the engine reads without running (the vision tower, the projector) and
  // saves back as they were.
  struct CheckpointNames {
    // model.embed_tokens.weight, model.layers.0.*, model.norm.weight (Nemotron-H: backbone.*)
    std::string decoder = "model.";
    std::string head = "lm_head.";     // lm_head.weight
    std::vector<std::string> carried;  // prefixes of the tensors carried through unchanged
    // The decoder's and head's prefixes as transformers names the modules in memory (PEFT's adapter keys,
    // model/lora_weights.cpp), where they differ from the checkpoint's: Nemotron-H's backbone.* is model.*.
    std::string decoder_in_memory = "model.", head_in_memory = "lm_head.";
  } checkpoint_names;

  AuxLoss aux_loss = AuxLoss::None;
  double aux_loss_coef = 0;
  bool aux_loss_by_default = false;  // config.json's output_router_logits

  std::optional<DType> dtype;  // the checkpoint's dtype as config.json states it
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  // The embedding row whose lookup passes no gradient back: transformers builds the decoders' token embedding as
  // nn.Embedding(vocab, hidden, padding_idx=pad_token_id), which zeroes that row's gradient from the lookup (a
  // tied LM head still adds its own). nullopt: every row learns (no pad_token_id, or a family without it).
  std::optional<int64_t> embedding_padding_idx;
  // transformers' Phi3ForCausalLM.prepare_inputs_for_generation: the first time a cached generation's sequence grows
  // past this many tokens while its cache holds no more, it drops the cache and runs the whole sequence again (so
  // longrope's long factors reach every cached key: model/generate.h); 0: never (the other families keep theirs).
  int64_t generation_cache_reset_length = 0;
  nlohmann::json json;  // config.json as read, written back unchanged on save

  int64_t num_layers() const { return int64_t(layers.size()); }
  bool is_moe() const { return moe_layer_count() > 0; }
  int64_t moe_layer_count() const;
  // The experts of every MoE layer share one count (the aux loss adds their statistics); 0 without MoE.
  int64_t num_experts() const;
  // The attention of the first layer: what batch-level helpers (RoPE frequencies for `generate`) need.
  const AttentionSpec& first_attention() const;
};

}  // namespace moetune::model
