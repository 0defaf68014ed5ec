// How one HF tensor becomes its piece of an engine parameter and back: a dtype conversion, and a transpose of
// the last two dimensions where the family marks the piece `transposed`. Loading and saving both go through
// here, so load -> save stays bit-exact.
#pragma once

#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// The piece's shape inside the engine parameter.
Shape engine_shape(const HfTensor& piece);
// Writes the HF tensor `hf` (shape piece.shape) into `destination` (engine_shape(piece), any float dtype).
void piece_to_engine(const Tensor& hf, const HfTensor& piece, const Tensor& destination);
// The HF tensor of `engine_view` (engine_shape(piece)) in `disk_dtype`.
Tensor piece_to_hf(const Tensor& engine_view, const HfTensor& piece, DType disk_dtype);

}  // namespace moetune::model
