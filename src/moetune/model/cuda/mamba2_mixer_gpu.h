// Nemotron-H's Mamba2 mixer on the GPU, the twin of model/mamba2_mixer.h (same Mamba2Spec, Mamba2Weights and
// semantics): in_proj and out_proj through cuBLASLt, the conv, the chunked SSD scan and the gated norm as CUDA
// kernels that read z, xBC and dt in place inside in_proj's output. BF16 activations and weights (conv weight
// [C, K]), fp32 inside the kernels; gradients BF16 or F32 as the weights' gradients are allocated.
#pragma once

#include <cstdint>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/mamba2_mixer.h"

namespace moetune::model::cuda {

// Mamba2Rows on the GPU: U8 [N] flags; valid undefined when there is no padding. start_rows: the host's list of
// the rows `starts` flags (ops::document_start_rows), where the Gated DeltaNet's kernels may split their walks.
struct Mamba2GpuRows {
  Tensor starts, valid;
  std::vector<int64_t> start_rows;
};
Mamba2GpuRows upload_mamba2_rows(const Mamba2Rows& rows);

// What the backward pass reads (BF16): the masked input [N, hidden], in_proj's output [N, projection], the
// masked conv output [N, conv_channels] and the scan's [N, inner]. The gated norm's output is recomputed.
struct Mamba2GpuStash {
  Tensor input, projected, conv, scan;
};

// x [N, hidden] (normed hidden states, BF16 on the GPU) -> [N, hidden]. The scan runs in chunks of
// `chunk_size` rows (config chunk_size). Fills `stash` when given.
Tensor mamba2_mixer_forward_gpu(const Mamba2Spec& spec, int64_t chunk_size, const Mamba2Weights& weights,
                                const Tensor& x, const Mamba2GpuRows& rows, Mamba2GpuStash* stash);

// Generation: x [n, hidden] (the normed new rows of one sequence) -> [n, hidden], the conv and the scan continued
// from conv_window (BF16 [conv_kernel − 1, conv channels]) and ssm_state (F32 [heads, head_dim, state]), both
// moved on to the last row (ops/cuda/mamba2_step.h; a prompt of several rows scans by chunks, from the state).
Tensor mamba2_mixer_step_gpu(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& x,
                             const Tensor& conv_window, const Tensor& ssm_state);

// Given dy [N, hidden]: accumulates every defined gradient in `grads` and returns dx [N, hidden] (BF16).
Tensor mamba2_mixer_backward_gpu(const Mamba2Spec& spec, int64_t chunk_size, const Mamba2Weights& weights,
                                 const Tensor& dy, const Mamba2GpuStash& stash, const Mamba2GpuRows& rows,
                                 const Mamba2Weights& grads);

}  // namespace moetune::model::cuda
