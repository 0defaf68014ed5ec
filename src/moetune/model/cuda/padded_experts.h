// relu² experts whose intermediate width I is not a multiple of 8 (the tiny test fixtures' 12) on the GPU: the
// grouped GEMMs move 16-byte rows, so the MoE block runs them on copies of the weights padded with zeros to
// I8 = ⌈I/8⌉·8 (model::gpu_experts_pre_activation_width): up's extra rows and down's extra columns are 0, and
// relu²(0) = 0 with slope 0, so every real output and gradient is the unpadded one; the padded weight gradients
// are cut back to I and added into the real ones. Costs two weight copies per forward: for small models only
// (every published width is a multiple of 8).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::model::cuda {

// up [E, I, D] -> [E, I8, D], the rows past I zero.
Tensor pad_expert_rows(const Tensor& up, int64_t padded);
// down [E, D, I] -> [E, D, I8], the columns past I zero.
Tensor pad_expert_columns(const Tensor& down, int64_t padded);
// into [E, I, D] += padded [E, I8, D] cut to its first I rows (into BF16 or F32; padded of into's dtype).
void add_cut_expert_rows(const Tensor& padded, const Tensor& into);
// into [E, D, I] += padded [E, D, I8] cut to its first I columns.
void add_cut_expert_columns(const Tensor& padded, const Tensor& into);

}  // namespace moetune::model::cuda
