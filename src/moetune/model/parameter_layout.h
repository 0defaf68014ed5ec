// The engine's parameters for a model and how each maps to Hugging Face tensors (the state-dict adapter, which
// each family writes with the builders of model/families/decoder_parameters.h).
//
// Inside, the engine fuses what runs as one GEMM: q/k/v into `attn.qkv` [(nq+2nkv)·hd, H], gate and up into
// `mlp.gate_up` [2I, H], and each MoE layer's experts stacked into `experts.gate_up` [E, 2I, H] and
// `experts.down` [E, H, I] (DESIGN.md §2). Every fused tensor is, in flat row-major memory, the
// concatenation of its HF tensors in order (q, k, v; gate, up; expert 0's gate, up, expert 1's, ...), so one
// rule maps both ways: piece i occupies the next numel(piece i) elements, transposed on the way in and out where the
// family says the checkpoint stores it transposed.
#pragma once

#include <string>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

// Partial RoPE (GLM-4-MoE: rotate-half within each head's first rotary_dim dimensions, the rest unrotated). The
// engine keeps such a head's dimensions as [rotating first half, passing first half, rotating second half, passing
// second half], so that its one full-width rotate-half RoPE, pairs (i, i + head_dim / 2), with zero frequencies on
// the passing pairs (ops/rope.h) rotates exactly what transformers rotates. q·k is the same sum in any common order
// of the dimensions, and q_norm / k_norm normalise over the whole head whatever its order, so the q and k rows (and
// their biases, norm weights and LoRA B rows) are reordered on load and back on save, and nothing else changes.
struct PartialRotary {
  int64_t head_dim = 0, rotary_dim = 0;  // 0: whole-head RoPE, rows as on disk
  // How many leading rows are such heads; the rows after them (v's, in a piece holding q, k and v as Phi-3's
  // qkv_proj does) stay as on disk. 0: every row.
  int64_t rotated_rows = 0;
  // The checkpoint's rotating dimensions are interleaved pairs (x0, x1), (x2, x3), ... (AttentionSpec::
  // rope_interleaved): the engine's rotating first half holds the pairs' first elements, its second half their
  // second elements. rotary_dim may then equal head_dim.
  bool interleaved = false;
  bool operator==(const PartialRotary&) const = default;
};

// Dimension 0 as `groups` groups of the `segments`' rows in order, where the engine keeps segment 0 of every group,
// then segment 1 of every group, and so on: Qwen3-Next's in_proj_qkvz holds per key head its q, k, v and z rows (the
// engine's in_proj: all q, all k, all v, all z), its gated q_proj per head the query rows, then the gate rows.
struct GroupedRows {
  int64_t groups = 0;  // 0: rows as on disk
  std::vector<int64_t> segments;
};

struct HfTensor {
  std::string name;  // "model.layers.0.self_attn.q_proj.weight"
  Shape shape;       // as stored on disk
  // Stored as the transpose of the engine's piece (its last two dimensions swapped), as GPT-OSS keeps its
  // experts: loading and saving transpose (model/piece_transform.h).
  bool transposed = false;
  // Dimension 1 of the engine's piece is stored as interleaved pairs (gate 0, up 0, gate 1, up 1, ...) where the
  // engine keeps [all gates; all ups], as GPT-OSS keeps its experts' gate_up_proj and its bias: loading
  // de-interleaves (after transposing), saving interleaves (before transposing back).
  bool interleaved_pairs = false;
  // Dimension 0 stacks heads of partial_rotary.head_dim rows, kept in the engine's partial-RoPE order (above).
  PartialRotary partial_rotary;
  // Dimension 0's groups kept segment by segment (above); applied before partial_rotary on load (which then counts
  // rows in the engine's order) and after it on save.
  GroupedRows grouped_rows;
};

// Buffer: a tensor the checkpoint holds and the model reads but transformers neither counts as a parameter nor
// trains (DeepSeek-V3's e_score_correction_bias); the family marks it not trainable.
enum class ParameterRole { Embedding, Norm, Matmul, Bias, Router, Experts, LmHead, Buffer };

// Where a parameter lives under parallelism: a copy on every rank, or split over the expert-parallel ranks.
enum class Placement { Replicated, ExpertSharded };

struct ParameterSpec {
  std::string name;  // engine name, "layers.0.attn.qkv"
  Shape shape;
  ParameterRole role;
  std::vector<HfTensor> pieces;  // concatenated in flat order to form the parameter
  // transformers v5 keeps MoE experts fused in memory as mlp.experts.gate_up_proj / down_proj with exactly
  // this layout; a checkpoint holding that one tensor instead of the per-expert pieces loads too.
  std::string fused_hf_name;
  // Of the parameter's elements, how many one token uses (experts: top-k of E), for active counts.
  int64_t active_numel = 0;
  Placement placement = Placement::Replicated;
  bool trainable = true;  // false: frozen, with no gradient and no optimizer state
  // A Buffer that transformers holds as a frozen nn.Parameter (ERNIE 4.5's moe_statics), which its
  // num_parameters() counts: total_parameters counts it too.
  bool counted_buffer = false;
};

struct ParameterLayout {
  ModelSpec spec;
  std::vector<ParameterSpec> parameters;  // in the order HF lists its tensors

  int64_t total_parameters() const;
  int64_t active_parameters() const;
  // Parameters that take part in a matmul per token (lm_head included, embedding lookup excluded): the
  // N in the usual 6·N training FLOPs per token.
  int64_t active_matmul_parameters() const;
};

// The family's builders (model/families/) fill it; model_description.h's parameter_layout() is the entry point.

}  // namespace moetune::model
