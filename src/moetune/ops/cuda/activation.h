// SwiGLU on the GPU (ops/activation.h semantics) on a fused [gate | up] input, and Nemotron-H's ungated relu²
// (ops/relu_squared.h), BF16 storage, fp32 math.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/activation.h"

namespace moetune::ops::cuda {

// gate_up BF16 [R, 2I] (gate in the first I columns) -> out BF16 [R, I] = silu(gate) ⊙ up.
void swiglu_forward(const Tensor& gate_up, const Tensor& out);
// dout BF16 [R, I] and the forward input gate_up -> dgate_up BF16 [R, 2I] (must not overlap the inputs).
// recomputed, when defined: BF16 [R, I] given the forward's output too (bit for bit swiglu_forward's), in the
// same pass over gate_up; it may be dout itself (each element of dout is read before it is overwritten) and
// overlaps nothing else. For the down projection's weight gradient, which needs the activation the forward did
// not keep: one pass over the pre-activation instead of two.
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up, const Tensor& recomputed = {});

// f(gate) ⊙ up for any gate function (ops/activation.h's GateFunction), same shapes and rules as swiglu_forward /
// swiglu_backward (which GateFunction::Silu runs).
void gated_forward(const Tensor& gate_up, GateFunction gate, const Tensor& out);
void gated_backward(const Tensor& dout, const Tensor& gate_up, GateFunction gate, const Tensor& dgate_up,
                    const Tensor& recomputed = {});

// GPT-OSS's clamped SwiGLU (ops/activation.h), same shapes and rules as swiglu_forward / swiglu_backward.
void clamped_swiglu_forward(const Tensor& gate_up, const SwigluClamp& clamp, const Tensor& out);
void clamped_swiglu_backward(const Tensor& dout, const Tensor& gate_up, const SwigluClamp& clamp,
                             const Tensor& dgate_up, const Tensor& recomputed = {});

// relu(x)² elementwise: x and out BF16 of one shape, not overlapping.
void relu_squared_forward(const Tensor& x, const Tensor& out);
// dx = dout · 2·relu(x); dout, x, dx BF16 of one shape, dx overlapping neither input.
void relu_squared_backward(const Tensor& dout, const Tensor& x, const Tensor& dx);

}  // namespace moetune::ops::cuda
