// How one HF tensor becomes its piece of an engine parameter and back: a dtype conversion, a transpose of the
// last two dimensions where the family marks the piece `transposed`, a de-interleave of dimension 1 where it
// marks it `interleaved_pairs`, and reorders of dimension 0's rows (grouped_rows, partial_rotary). Loading and saving
// both go through here, so load -> save stays bit-exact.
#pragma once

#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// `source` [..., rows, cols] -> a new [..., cols, rows] tensor of the same dtype (bytes moved, any dtype).
Tensor transpose_last_two(const Tensor& source);

// The rows of `matrix` [2n, cols] between interleaved pairs (a0, b0, a1, b1, ...) and halves (a0 .. a(n-1), b0 ..
// b(n-1)): a LoRA B [2I, r·E] of GPT-OSS's gate_up_proj, whose output columns interleave gate and up on disk.
Tensor reorder_interleaved_rows(const Tensor& matrix, bool to_halves);

// Dimension 0 of `rows` (heads of rotary.head_dim rows each) between the checkpoint's order and the engine's
// partial-RoPE order (parameter_layout.h's PartialRotary); a copy, any dtype. Identity when rotary is empty.
Tensor reorder_partial_rotary_rows(const Tensor& rows, const PartialRotary& rotary, bool to_engine);

// Dimension 0 of `rows` between the checkpoint's groups and the engine's segments (parameter_layout.h's
// GroupedRows); a copy, any dtype. Identity when grouping is empty.
Tensor reorder_grouped_rows(const Tensor& rows, const GroupedRows& grouping, bool to_engine);

// The piece's shape inside the engine parameter.
Shape engine_shape(const HfTensor& piece);
// Writes the HF tensor `hf` (shape piece.shape) into `destination` (engine_shape(piece), any float dtype).
void piece_to_engine(const Tensor& hf, const HfTensor& piece, const Tensor& destination);
// The HF tensor of `engine_view` (engine_shape(piece)) in `disk_dtype`.
Tensor piece_to_hf(const Tensor& engine_view, const HfTensor& piece, DType disk_dtype);

}  // namespace moetune::model
