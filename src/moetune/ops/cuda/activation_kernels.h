// Launchers of the SwiGLU kernels on a fused [gate | up] BF16 input (and of relu², ungated): raw pointers in, a CUDA status out. Free of
// the engine's host headers so that .cu files compile without fmt; ops/cuda/activation.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out[r, i] = silu(gate_up[r, i]) · gate_up[r, inner + i] for rows × inner outputs.
cudaError_t launch_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, cudaStream_t stream);

// dgate_up [rows, 2·inner] from dout [rows, inner] and the forward input gate_up; with recomputed (else null;
// it may be dout) also the forward's output [rows, inner] in the same pass.
cudaError_t launch_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                   int64_t inner, cudaStream_t stream);

// The same for GPT-OSS's clamped SwiGLU (ops/activation.h: clamped_swiglu_forward/backward).
cudaError_t launch_clamped_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, float alpha,
                                          float limit, cudaStream_t stream);
cudaError_t launch_clamped_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                                           int64_t rows, int64_t inner, float alpha, float limit, cudaStream_t stream);

// The gated MLPs' other gate functions (ops/activation.h's GateFunction: these values, in its order), same
// shapes and rules as the SwiGLU launchers, on the plain grid-stride kernels.
enum class KernelGate { Silu, Gelu, GeluTanh, QuickGelu, Relu };
cudaError_t launch_gated_forward(KernelGate gate, const void* gate_up, void* out, int64_t rows, int64_t inner,
                                 cudaStream_t stream);
cudaError_t launch_gated_backward(KernelGate gate, const void* dout, const void* gate_up, void* dgate_up,
                                  void* recomputed, int64_t rows, int64_t inner, cudaStream_t stream);

// Nemotron-H's relu² over `count` contiguous BF16 elements: out = relu(x)², dx = dout · 2·relu(x).
cudaError_t launch_relu_squared_forward(const void* x, void* out, int64_t count, cudaStream_t stream);
cudaError_t launch_relu_squared_backward(const void* dout, const void* x, void* dx, int64_t count, cudaStream_t stream);

}  // namespace moetune::ops::cuda
