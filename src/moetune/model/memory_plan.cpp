#include "moetune/model/memory_plan.h"

#include <algorithm>


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

// Mirrors ops::cuda::linear_cross_entropy's default chunk (about 256 MiB of bf16 logits) and the GEMM library's
// fixed workspace (ops/cuda/gemm.cpp).
constexpr int64_t kCrossEntropyChunkBytes = 256ll << 20;
constexpr int64_t kGemmWorkspaceBytes = 32ll << 20;

}  // namespace

const char* block_kind(const SublayerSpec& sublayer) {
  return sublayer.attention() ? "attention" : sublayer.mlp() ? "mlp" : "moe";
}

int64_t gpu_stash_bytes(const SublayerSpec& sublayer, int64_t hidden, int64_t tokens) {
  const int64_t T = tokens, H = hidden;
  if (const AttentionSpec* a = sublayer.attention()) {
    // input, qkv, q, k, v, attended, the softmax statistics.
    const int64_t q = a->num_heads * a->qk_head_dim, k = a->num_kv_heads * a->qk_head_dim;
    const int64_t v = a->num_kv_heads * a->v_head_dim, attended = a->num_heads * a->v_head_dim;
    return T * (H + (q + k + v) + q + k + v + attended) * kBf16 + T * a->num_heads * kF32;
  }
  if (const MlpSpec* m = sublayer.mlp()) return T * (H + 2 * m->intermediate) * kBf16;  // input, pre-activation
  const MoeSpec& m = *sublayer.moe();
  const int64_t k = m.router.top_k, E = m.router.num_experts, rows = T * k, I = m.experts.intermediate;
  // input, router logits (f32), choices and weights, the dispatcher's plan, the experts' input, pre-activation
  // and output.
  int64_t bytes = T * H * kBf16 + T * E * kF32 + T * k * (kI32 + kF32) + (E + 1) * kI32 + 2 * rows * kI32 +
                  rows * (H + 2 * I + H) * kBf16;
  if (m.shared_expert) {
    bytes += T * 2 * m.shared_expert->mlp.intermediate * kBf16;                   // its pre-activation
    if (m.shared_expert->sigmoid_gate) bytes += T * H * kBf16 + T * kF32;         // its output, the gate logits
  }
  return bytes;
}

ActivationPlan gpu_activation_plan(const ModelSpec& spec, int64_t tokens) {
  const int64_t T = tokens, H = spec.hidden_size;
  ActivationPlan plan;
  int64_t widest_mlp = 0, widest_rows = 0;
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) {
      const std::string kind = block_kind(sublayer);
      auto entry = std::find_if(plan.stash.begin(), plan.stash.end(), [&](const auto& e) { return e.first == kind; });
      if (entry == plan.stash.end()) entry = plan.stash.insert(plan.stash.end(), {kind, 0});
      entry->second += gpu_stash_bytes(sublayer, H, T);
      if (const MlpSpec* m = sublayer.mlp()) widest_mlp = std::max(widest_mlp, m->intermediate);
      if (const MoeSpec* m = sublayer.moe()) {
        widest_rows = std::max(widest_rows, T * m->router.top_k);
        entry->second += 2 * m->router.num_experts * kF32;  // the per-layer counts kept for telemetry
      }
    }
  plan.stash.emplace_back("head", T * H * kBf16);  // the final hidden state, until the final norm's backward
  for (const auto& [name, bytes] : plan.stash) plan.stash_bytes += bytes;

  // The largest sets of temporaries on top of the stashes: the fused head + loss at the end of the forward
  // pass (normalised hidden state, its gradient, one chunk of logits), and the first step of the last MoE
  // layer's backward (the layer's incoming gradient and the experts' output gradient beside their kept
  // output, plus the routing weights' gradient).
  const int64_t chunk_rows = std::max<int64_t>(1, std::min<int64_t>(T, kCrossEntropyChunkBytes / (spec.vocab_size * kBf16)));
  const int64_t head = 2 * T * H * kBf16 + chunk_rows * spec.vocab_size * kBf16;
  const int64_t moe_backward = widest_rows > 0 ? T * H * kBf16 + widest_rows * H * kBf16 + widest_rows * kF32 : 0;
  const int64_t dense_backward = widest_mlp > 0 ? T * H * kBf16 + T * (widest_mlp * 3) * kBf16 : 0;
  plan.peak_phase = "lm head + loss";
  plan.transient_bytes = head;
  if (moe_backward > plan.transient_bytes) {
    plan.peak_phase = "moe backward";
    plan.transient_bytes = moe_backward;
  }
  if (dense_backward > plan.transient_bytes) {
    plan.peak_phase = "mlp backward";
    plan.transient_bytes = dense_backward;
  }
  plan.workspace_bytes = kGemmWorkspaceBytes;
  return plan;
}

}  // namespace moetune::model
