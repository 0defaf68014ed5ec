// The memory a full fine-tune holds for its whole run, per optimizer precision: weights, gradients,
// master copy and AdamW moments. Activations depend on the recipe (sequence, micro-batch, recomputation)
// and are planned by the training step, not here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moetune::model {

struct PrecisionPlan {
  // recipe spelling: fp32_master, bf16_stochastic_rounding, pure_bf16, cpu_fp32 (optimizer.precision), with
  // "+int8" for optimizer.state: int8
  std::string name;
  std::string description;
  int64_t weight_bytes;     // per parameter, for each part
  int64_t gradient_bytes;
  int64_t master_bytes;
  int64_t optimizer_bytes;  // AdamW's two moments (with int8 state: their codes, 1 byte each)
  bool int8_state = false;  // then each moment also holds an F32 absmax per block of 256 elements of a tensor

  // The moments of `parameters` elements in `blocks` blocks (the sum of ops::adamw_state_blocks over the
  // tensors, or over the optimizer's flat runs: within a few blocks of each other).
  int64_t optimizer_state_bytes(int64_t parameters, int64_t blocks) const {
    return optimizer_bytes * parameters + (int8_state ? 2 * 4 * blocks : 0);
  }
  int64_t static_bytes(int64_t parameters, int64_t blocks) const {
    return (weight_bytes + gradient_bytes + master_bytes) * parameters + optimizer_state_bytes(parameters, blocks);
  }
  double bytes_per_parameter() const {
    return double(weight_bytes + gradient_bytes + master_bytes + optimizer_bytes) + (int8_state ? 8.0 / 256 : 0.0);
  }
};

const std::vector<PrecisionPlan>& precision_plans();

}  // namespace moetune::model

#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"
#include "moetune/model/recompute.h"

namespace moetune::model {

// The GPU training step's activation memory for `tokens` tokens per micro-batch, summed over the model's
// sublayers from what each GPU block declares it keeps for its backward pass (gpu_stash_bytes below, which the
// GPU tests check against the blocks' own stash_bytes()), the largest set of temporaries alive at once on top of
// all stashes, and the libraries' workspaces. `moetune inspect --tokens N` prints it; the GPU benchmark compares it with the
// allocator's measured peak.
struct ActivationPlan {
  std::vector<std::pair<std::string, int64_t>> stash;  // per block kind, bytes per layer × layers
  int64_t stash_bytes = 0;
  std::string peak_phase;       // where the temporaries peak
  int64_t transient_bytes = 0;  // temporaries alive at that point, beyond the stashes
  int64_t workspace_bytes = 0;  // GEMM/cross-entropy/attention workspaces held for the step
  int64_t total() const { return stash_bytes + transient_bytes + workspace_bytes; }
};

// With recomputation (training.recompute) a recomputed sublayer keeps only its input, and its whole stash comes
// back, on top of its backward pass's temporaries, while that backward runs.
// `keep_last_layers`: training.recompute_keep_layers (model/recompute.h). `lm_head_chunk_rows`:
// training.lm_head_chunk_rows, the fused LM head's chunk height (0: the op's own rule, ops/lm_head_chunk.h).
// `lora`: LoRA adapters are trained (the blocks then recompute their norms: model/recompute.h keeps_outputs).
ActivationPlan gpu_activation_plan(const ModelSpec& spec, int64_t tokens, Recompute recompute = Recompute::None,
                                   int64_t keep_last_layers = 0, int64_t lm_head_chunk_rows = 0, bool lora = false);

// The trainable parameters whose gradients exist at once: all of them, or with the update during the backward
// pass (optimizer.update_in_backward) those outside the decoder layers plus the largest layer's (they share one
// buffer: model::GradientStorage::LayerArena).
int64_t gradient_parameters_held(const ParameterLayout& layout, bool update_in_backward);

// The per-head widths MLA's GPU block gives cuDNN (model/cuda/mla_attention_block.cpp): each rounded up to 8
// elements (16-byte rows), q/k at least as wide as v; the padding columns are zero.
struct MlaHeadWidths {
  int64_t qk = 0, v = 0;
};
MlaHeadWidths gpu_mla_head_widths(const AttentionSpec& attention);
// Whether the GPU's MLA block leaves v in kv_b's output for attention to read (and dv in its gradient): q rotated
// in place, v unpadded, and ops/mla_v_in_place.h's conditions (the rope key read from kv_a's output).
bool gpu_mla_v_in_kv(const AttentionSpec& attention);

// What one GPU block (model/cuda/*_block.h) keeps from its forward to its backward pass for `tokens` tokens, with
// its norms' outputs and its activations when `keep_outputs` (model/recompute.h keeps_outputs).
int64_t gpu_stash_bytes(const SublayerSpec& sublayer, int64_t hidden, int64_t tokens, bool keep_outputs);

// The routed experts' pre-activation width on the GPU: the grouped GEMMs move 16-byte rows, so relu² experts
// whose intermediate size is not a multiple of 8 run padded to the next one (model/cuda/padded_experts.h);
// otherwise MlpSpec::first_projection().
int64_t gpu_experts_pre_activation_width(const MlpSpec& experts);
// The stash report's name of a sublayer's block kind: "attention", "mlp" or "moe".
const char* block_kind(const SublayerSpec& sublayer);

}  // namespace moetune::model
