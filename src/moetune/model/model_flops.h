// Model FLOPs of training, as DESIGN.md §5 counts them for the benchmarks (bench/model_flops.py): the work the
// model needs, not what the engine happens to run (recomputation and padding are not counted), so TFLOP/s
// compare across engines.
#pragma once

#include <cstdint>

#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// Forward + backward FLOPs per token in rows of `sequence` tokens: 6 × the active matmul parameters (LM head
// included, embedding lookup excluded) + per attention layer 6 × heads × head_dim × the tokens each one sees
// (the whole row, halved by the causal mask; at most the window of a sliding-window layer).
double training_flops_per_token(const ParameterLayout& layout, int64_t sequence);

}  // namespace moetune::model
