#include "moetune/model/memory_plan.h"

#include <algorithm>

#include "moetune/io/hf_config.h"

namespace moetune::model {

const std::vector<PrecisionPlan>& precision_plans() {
  static const std::vector<PrecisionPlan> plans = {
      {"fp32_master", "bf16 weights and gradients, fp32 master weights and AdamW moments", 2, 2, 4, 8},
      {"bf16_stochastic_rounding", "bf16 weights, gradients and moments, written with stochastic rounding", 2, 2, 0, 4},
      {"pure_bf16", "bf16 weights, gradients and moments (what HF does for a model loaded in bf16)", 2, 2, 0, 4},
      {"cpu_fp32", "fp32 throughout (the CPU engine)", 4, 4, 0, 8},
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

ActivationPlan gpu_activation_plan(const io::ModelConfig& c, int64_t tokens) {
  const int64_t T = tokens, H = c.hidden_size, d = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qkv_width = (nq + 2 * nkv) * d;
  int64_t moe_layers = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) moe_layers += c.is_moe_layer(layer);
  const int64_t dense_layers = c.num_hidden_layers - moe_layers;

  // AttentionBlock: input, qkv, q, k, v, attended, the softmax statistics.
  const int64_t attention = T * (H + qkv_width + nq * d + 2 * nkv * d + nq * d) * kBf16 + T * nq * kF32;
  ActivationPlan plan;
  plan.stash.emplace_back("attention", attention * c.num_hidden_layers);
  int64_t moe = 0, expert_rows = 0, expert_inner = 0;
  if (moe_layers > 0) {
    const int64_t k = c.num_experts_per_tok, E = c.num_experts;
    expert_rows = T * k;
    expert_inner = c.moe_intermediate_size;
    // MoeBlock: input, router logits (f32), choices and weights, the permutation, the experts' input,
    // pre-activation and output; the per-layer counts kept for telemetry.
    moe = T * H * kBf16 + T * E * kF32 + T * k * (kI32 + kF32) + (E + 1) * kI32 + 2 * T * k * kI32 +
          expert_rows * (H + 2 * expert_inner + H) * kBf16 + 2 * E * kF32;
    plan.stash.emplace_back("moe", moe * moe_layers);
  }
  if (dense_layers > 0) plan.stash.emplace_back("mlp", T * (H + 2 * c.intermediate_size) * kBf16 * dense_layers);
  plan.stash.emplace_back("head", T * H * kBf16);  // the final hidden state, until the final norm's backward
  for (const auto& [name, bytes] : plan.stash) plan.stash_bytes += bytes;

  // The largest sets of temporaries on top of the stashes: the fused head + loss at the end of the forward
  // pass (normalised hidden state, its gradient, one chunk of logits), and the first step of the last MoE
  // layer's backward (the layer's incoming gradient and the experts' output gradient beside their kept
  // output, plus the routing weights' gradient).
  const int64_t chunk_rows = std::max<int64_t>(1, std::min<int64_t>(T, kCrossEntropyChunkBytes / (c.vocab_size * kBf16)));
  const int64_t head = 2 * T * H * kBf16 + chunk_rows * c.vocab_size * kBf16;
  const int64_t moe_backward = moe_layers > 0 ? T * H * kBf16 + expert_rows * H * kBf16 + expert_rows * kF32 : 0;
  const int64_t dense_backward = T * H * kBf16 + T * (c.intermediate_size * 3) * kBf16;
  plan.peak_phase = "lm head + loss";
  plan.transient_bytes = head;
  if (moe_backward > plan.transient_bytes) {
    plan.peak_phase = "moe backward";
    plan.transient_bytes = moe_backward;
  }
  if (dense_layers > 0 && dense_backward > plan.transient_bytes) {
    plan.peak_phase = "mlp backward";
    plan.transient_bytes = dense_backward;
  }
  plan.workspace_bytes = kGemmWorkspaceBytes;
  return plan;
}

}  // namespace moetune::model
