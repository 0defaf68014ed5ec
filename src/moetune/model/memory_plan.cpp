#include "moetune/model/memory_plan.h"

#include <algorithm>

#include "moetune/model/gradient_ready_layer.h"
#include "moetune/ops/lm_head_chunk.h"
#include "moetune/ops/mla_v_in_place.h"


namespace moetune::model {

const std::vector<PrecisionPlan>& precision_plans() {
  static const std::vector<PrecisionPlan> plans = {
      {"fp32_master", "bf16 weights and gradients, fp32 master weights and AdamW moments", 2, 2, 4, 8},
      {"bf16_stochastic_rounding", "bf16 weights, gradients and moments, written with stochastic rounding", 2, 2, 0, 4},
      {"pure_bf16", "bf16 weights, gradients and moments (what HF does for a model loaded in bf16)", 2, 2, 0, 4},
      {"cpu_fp32", "fp32 throughout (the CPU engine)", 4, 4, 0, 8},
      {"fp32_master+int8", "as fp32_master, AdamW moments in 8 bits (optimizer.state: int8)", 2, 2, 4, 2, true},
      {"bf16_stochastic_rounding+int8", "as bf16_stochastic_rounding, AdamW moments in 8 bits", 2, 2, 0, 2, true},
      {"pure_bf16+int8", "as pure_bf16, AdamW moments in 8 bits", 2, 2, 0, 2, true},
      {"cpu_fp32+int8", "as cpu_fp32, AdamW moments in 8 bits", 4, 4, 0, 2, true},
  };
  return plans;
}

}  // namespace moetune::model

namespace moetune::model {
namespace {

constexpr int64_t kBf16 = 2, kF32 = 4, kI32 = 4;

// Mirrors the GEMM library's fixed workspace (ops/cuda/gemm.cpp).
constexpr int64_t kGemmWorkspaceBytes = 32ll << 20;

}  // namespace

const char* block_kind(const SublayerSpec& sublayer) {
  return sublayer.attention()     ? "attention"
         : sublayer.mlp()         ? "mlp"
         : sublayer.mamba2()      ? "mamba2"
         : sublayer.gated_delta() ? "gated_delta"
                                  : "moe";
}

int64_t gpu_experts_pre_activation_width(const MlpSpec& experts) {
  const int64_t first = experts.first_projection();
  return experts.activation == Activation::ReluSquared ? (first + 7) / 8 * 8 : first;
}

MlaHeadWidths gpu_mla_head_widths(const AttentionSpec& attention) {
  const auto round_up_8 = [](int64_t n) { return (n + 7) / 8 * 8; };
  const int64_t v = round_up_8(attention.v_head_dim);
  return {std::max(round_up_8(attention.qk_head_dim), v), v};
}

bool gpu_mla_v_in_kv(const AttentionSpec& attention) {
  const MlaSpec& mla = *attention.mla;
  const MlaHeadWidths widths = gpu_mla_head_widths(attention);
  return widths.qk == mla.qk_nope_head_dim + mla.qk_rope_head_dim && widths.v == attention.v_head_dim &&
         ops::mla_v_in_kv(attention.num_heads, mla.qk_nope_head_dim, mla.qk_rope_head_dim, attention.v_head_dim,
                          widths.qk, /*k_rope_stride=*/mla.kv_lora_rank + mla.qk_rope_head_dim);
}

int64_t gpu_stash_bytes(const SublayerSpec& sublayer, int64_t hidden, int64_t tokens, bool keep_outputs) {
  const int64_t T = tokens, H = hidden;
  // the input norm's output, where kept and the sublayer has one; the output norm's input (OLMo-2)
  const int64_t normed = keep_outputs && !sublayer.norm.empty() ? T * H * kBf16 : 0;
  const int64_t out_normed = sublayer.out_norm.empty() ? 0 : T * H * kBf16;
  if (const AttentionSpec* a = sublayer.attention()) {
    if (const MlaSpec* mla = a->mla ? &*a->mla : nullptr) {
      // input, q's latent (with q_lora_rank), kv_a's output (the kv latent and the shared rope key), q, k, v and
      // attended at cuDNN's widths, the softmax statistics (model/cuda/mla_attention_block.cpp: no fused q/k/v
      // output kept); v is kv_b's whole output [k_nope | v] where attention reads it there (ops/mla_v_in_place.h);
      // where kept, the three norms' outputs (input, q latent, kv latent).
      const int64_t q_latent = mla->q_lora_rank.value_or(0), kv_latent = mla->kv_lora_rank + mla->qk_rope_head_dim;
      const MlaHeadWidths widths = gpu_mla_head_widths(*a);
      const int64_t qk = a->num_heads * widths.qk, v = a->num_heads * widths.v;
      const int64_t v_held = gpu_mla_v_in_kv(*a) ? a->num_heads * (mla->qk_nope_head_dim + a->v_head_dim) : v;
      const int64_t latents_normed = keep_outputs ? T * (q_latent + mla->kv_lora_rank) * kBf16 : 0;
      return T * (H + q_latent + kv_latent + 2 * qk + v_held + v) * kBf16 + T * a->num_heads * kF32 + normed +
             latents_normed;
    }
    // input, qkv (with an output gate's logits), q, k, v, attended, the softmax statistics.
    const int64_t q = a->num_heads * a->qk_head_dim, k = a->num_kv_heads * a->qk_head_dim;
    const int64_t v = a->num_kv_heads * a->v_head_dim, attended = a->num_heads * a->v_head_dim;
    const int64_t gate = a->output_gate ? q : 0;
    return T * (H + (q + gate + k + v) + q + k + v + attended) * kBf16 + T * a->num_heads * kF32 + normed + out_normed;
  }
  // input, pre-activation, and the norm's output and the activation where kept
  if (const MlpSpec* m = sublayer.mlp())
    return T * (H + m->first_projection() + (keeps_activation(*m, keep_outputs) ? m->intermediate : 0)) * kBf16 +
           normed + out_normed;
  if (const Mamba2Spec* m = sublayer.mamba2()) {
    // input, in_proj's output, the conv's, the scan's (the normed input and the scan's chunk states are
    // recomputed in the backward pass).
    return T * (H + m->projection() + m->conv_channels() + m->inner()) * kBf16;
  }
  if (const GatedDeltaSpec* g = sublayer.gated_delta())  // as Mamba2's: input, in_proj's, the conv's, the rule's
    return T * (H + g->projection() + g->conv_channels() + g->value_dim()) * kBf16;
  const MoeSpec& m = *sublayer.moe();
  const int64_t k = m.router.top_k, E = m.router.num_experts, rows = T * k, D = m.expert_width(H);
  // input, the norms' tensors, router logits (f32), choices and weights, the dispatcher's plan, the experts' input,
  // pre-activation and output; with a latent, the weighted sum before the projection back (the experts' input rows are
  // the projected ones).
  int64_t bytes = T * H * kBf16 + normed + out_normed + T * E * kF32 + T * k * (kI32 + kF32) + (E + 1) * kI32 +
                  2 * rows * kI32 + rows * (D + gpu_experts_pre_activation_width(m.experts) + D) * kBf16;
  if (keeps_activation(m.experts, keep_outputs)) bytes += rows * m.experts.intermediate * kBf16;  // the activation
  if (m.latent_size) bytes += T * D * kBf16;
  if (m.shared_expert) {
    const MlpSpec& shared = m.shared_expert->mlp;
    bytes += T * (shared.first_projection() + (keeps_activation(shared, keep_outputs) ? shared.intermediate : 0)) *
             kBf16;  // its pre-activation, and its activation where kept
    if (m.shared_expert->sigmoid_gate) bytes += T * H * kBf16 + T * kF32;         // its output, the gate logits
  }
  return bytes;
}

namespace {

// The chunked scan's fp32 workspace in its backward pass (ops/cuda/mamba2_scan.cu's Scratch): per row dt, the
// cumulative decay and dy·y; per chunk C·B per group and the entering state and its gradient; per row and head
// the heads' shares of dB and dC.
int64_t mamba2_scan_backward_workspace(const Mamba2Spec& m, int64_t T) {
  const int64_t chunks = (T + m.chunk_size - 1) / m.chunk_size, heads = m.num_heads;
  const int64_t states = (chunks + 1) * heads * m.head_dim * m.state_size;
  return (3 * T * heads + T + chunks * m.num_groups * m.chunk_size * m.chunk_size + 2 * states +
          2 * T * heads * m.state_size + 3 * chunks * heads) * kF32;
}

// The recurrent rule's fp32 workspace in its backward pass (ops/cuda/gated_delta_rule.cu's Scratch, its head dims
// padded as there): the normalized q and k, four floats a row and value head, the state S and the gradient G~ at
// every 64-row segment, u and ddelta, per block of 128 value columns the dq and dk partials and two floats a row and
// value head, and o·do (one float a row and value head).
int64_t gated_delta_backward_workspace(const GatedDeltaSpec& g, int64_t T) {
  const int64_t dk = g.k_head_dim <= 32 ? 32 : g.k_head_dim <= 64 ? 64 : g.k_head_dim <= 128 ? 128 : 256;
  const int64_t dv = (g.v_head_dim + 7) / 8 * 8, parts = (dv + 127) / 128, heads = g.num_v_heads;
  return (2 * T * g.num_k_heads * dk + 4 * T * heads + 2 * ((T + 63) / 64) * heads * dk * dv + 2 * T * heads * dv +
          parts * (2 * T * heads * dk + 2 * T * heads) + T * heads) *
         kF32;
}

// The temporaries of a sublayer's backward pass at their largest, beyond the stashes: the dense MLP's at the
// first step of its backward, the MoE's where its experts' gradients meet (beside the incoming gradient and the
// routing weights' gradient), attention's while its q/k/v gradients and their fused projection's meet.
int64_t backward_transient_bytes(const SublayerSpec& sublayer, int64_t H, int64_t T) {
  const int64_t dmixed = sublayer.out_norm.empty() ? 0 : T * H * kBf16;  // d(the output norm's input), OLMo-2, FlexOlmo
  if (const AttentionSpec* a = sublayer.attention()) {
    const int64_t q = a->num_heads * a->qk_head_dim, k = a->num_kv_heads * a->qk_head_dim;
    const int64_t v = a->num_kv_heads * a->v_head_dim, attended = a->num_heads * a->v_head_dim;
    // An output gate: its logits' gradient in dqkv, and the gated output recomputed for o_proj's weight gradient.
    const int64_t gate = a->output_gate ? q + attended : 0;
    return T * (H + attended + 2 * (q + k + v) + gate) * kBf16 + dmixed;
  }
  if (const MlpSpec* m = sublayer.mlp()) return T * H * kBf16 + T * (m->intermediate * 3) * kBf16 + dmixed;
  if (const Mamba2Spec* m = sublayer.mamba2())  // at the scan's backward: the recomputed input, the gated norm's
    // output and gradient, d(in_proj's output), d(scan), d(conv) beside the scan's workspace
    return T * (H + 3 * m->inner() + m->projection() + m->conv_channels()) * kBf16 + mamba2_scan_backward_workspace(*m, T);
  if (const GatedDeltaSpec* g = sublayer.gated_delta())  // the same parts as Mamba2's, beside the rule's workspace
    return T * (H + 3 * g->value_dim() + g->projection() + g->conv_channels()) * kBf16 +
           gated_delta_backward_workspace(*g, T);
  const MoeSpec& moe = *sublayer.moe();
  const int64_t rows = T * moe.router.top_k, D = moe.expert_width(H);
  const int64_t pre = gpu_experts_pre_activation_width(moe.experts);
  // Gated experts (model/cuda/moe_block.cpp): d(expert_out) [rows, D] kept until down's weight gradient, beside
  // d(gate_up) and d(activated) (then the recomputed activation); relu²: d(gate_up) beside d(rows) at the end.
  const int64_t expert_rows = moe.experts.activation == Activation::ReluSquared ? D + pre : D + pre + pre / 2;
  return T * H * kBf16 + rows * expert_rows * kBf16 + rows * kF32 + dmixed;
}

}  // namespace

int64_t gradient_parameters_held(const ParameterLayout& layout, bool update_in_backward) {
  const int64_t layers = layout.spec.num_layers();
  int64_t outside = 0;
  std::vector<int64_t> per_layer(size_t(std::max<int64_t>(layers, 1)), 0);
  for (const ParameterSpec& p : layout.parameters) {
    if (!p.trainable) continue;
    const int64_t layer = update_in_backward ? gradient_ready_layer(p.name, layers) : -1;
    (layer >= 0 && layer < layers ? per_layer[size_t(layer)] : outside) += shape_numel(p.shape);
  }
  return outside + *std::max_element(per_layer.begin(), per_layer.end());
}

ActivationPlan gpu_activation_plan(const ModelSpec& spec, int64_t tokens, Recompute recompute, int64_t keep_last_layers,
                                   int64_t lm_head_chunk_rows, bool lora) {
  const int64_t T = tokens, H = spec.hidden_size;
  const bool keep_outputs = keeps_outputs(recompute, lora);
  ActivationPlan plan;
  // The largest such backward's temporaries (not recomputed); a recurrent mixer's: Mamba2's or a Gated DeltaNet's.
  int64_t moe_backward = 0, mlp_backward = 0, recurrent_backward = 0;
  int64_t recomputed_backward = 0;    // the largest recomputed sublayer's stash (beyond its input) + backward's
  std::string recomputed_kind;
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer)
    for (const SublayerSpec& sublayer : spec.layers[size_t(layer)].sublayers) {
      const std::string kind = block_kind(sublayer);
      auto entry = std::find_if(plan.stash.begin(), plan.stash.end(), [&](const auto& e) { return e.first == kind; });
      if (entry == plan.stash.end()) entry = plan.stash.insert(plan.stash.end(), {kind, 0});
      const int64_t stash = gpu_stash_bytes(sublayer, H, T, keep_outputs), input = T * H * kBf16;
      const int64_t backward = backward_transient_bytes(sublayer, H, T);
      if (recomputes(recompute, sublayer, layer, spec.num_layers(), keep_last_layers)) {
        entry->second += input;
        if (stash - input + backward > recomputed_backward) {
          recomputed_backward = stash - input + backward;
          recomputed_kind = kind;
        }
      } else {
        entry->second += stash;
        if (sublayer.moe()) moe_backward = std::max(moe_backward, backward);
        if (sublayer.mlp()) mlp_backward = std::max(mlp_backward, backward);
        if (sublayer.mamba2() || sublayer.gated_delta()) recurrent_backward = std::max(recurrent_backward, backward);
      }
      if (const MoeSpec* m = sublayer.moe()) entry->second += 2 * m->router.num_experts * kF32;  // counts kept for telemetry
    }
  plan.stash.emplace_back("head", T * H * kBf16);  // the final hidden state, until the final norm's backward
  for (const auto& [name, bytes] : plan.stash) plan.stash_bytes += bytes;

  // The largest sets of temporaries on top of the stashes: the fused head + loss at the end of the forward
  // pass (normalised hidden state, its gradient, one chunk of logits), an MoE or MLP sublayer's backward, and
  // a recomputed sublayer's stash with its backward.
  const int64_t chunk_rows = ops::lm_head_chunk_rows(T, spec.vocab_size, lm_head_chunk_rows);  // the op's own chunk
  const std::vector<std::pair<std::string, int64_t>> candidates = {
      {"lm head + loss", 2 * T * H * kBf16 + chunk_rows * spec.vocab_size * kBf16},
      {"moe backward", moe_backward},
      {"mlp backward", mlp_backward},
      {"recurrent mixer backward", recurrent_backward},
      {"recomputed " + recomputed_kind + " backward", recomputed_backward}};
  for (const auto& [phase, bytes] : candidates)
    if (bytes > plan.transient_bytes) {
      plan.peak_phase = phase;
      plan.transient_bytes = bytes;
    }
  plan.workspace_bytes = kGemmWorkspaceBytes;
  return plan;
}

}  // namespace moetune::model
