// optimizer.update_in_backward, resolved for a run: whether the GPU engine applies AdamW during the backward
// pass (train/cuda/update_in_backward.h). The engine and the memory plan of training.micro_batch_size: auto ask
// the same question, so it is answered once here.
#pragma once

#include "moetune/train/recipe.h"

namespace moetune::train {

// auto: on one rank without clipping or gradient accumulation; on: the same, or an Error naming what stands in
// the way; off: never.
bool updates_in_backward(const Recipe& recipe, int world);

}  // namespace moetune::train
