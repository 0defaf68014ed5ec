// SwiGLU and GPT-OSS's clamped SwiGLU, forward and backward, on a fused [gate | up] row, and Nemotron-H's
// ungated relu², fp32 math on BF16 storage. Grid-stride over kVec-wide column chunks of every row: kVec = 8
// (16-byte accesses) when the inner width and the pointers allow it, else 1.
#include <algorithm>
#include <initializer_list>

#include "moetune/ops/cuda/activation_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this: bounds the grid, not the work

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The gated activations the kernels below apply per (gate, up) pair.
struct Silu {
  __device__ __forceinline__ float forward(float g, float u) const { return g * sigmoid(g) * u; }
  __device__ __forceinline__ void backward(float g, float u, float d, float& dg, float& du) const {
    const float s = sigmoid(g);
    du = d * g * s;
    dg = d * u * s * (1.0f + g * (1.0f - s));  // d silu = s (1 + g (1 - s))
  }
};

// GPT-OSS (ops/activation.h's clamped_swiglu_*): a clamped value passes no gradient, as torch's clamp.
struct ClampedSilu {
  float alpha, limit;
  __device__ __forceinline__ float forward(float gate, float up) const {
    const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
    return (u + 1.0f) * (g * sigmoid(g * alpha));
  }
  __device__ __forceinline__ void backward(float gate, float up, float d, float& dg, float& du) const {
    const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
    const float s = sigmoid(g * alpha);
    du = up >= -limit && up <= limit ? d * g * s : 0.0f;
    dg = gate <= limit ? d * (u + 1.0f) * (s + alpha * g * s * (1.0f - s)) : 0.0f;
  }
};

template <int kVec, typename Act>
__global__ void gated_forward_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ out, int64_t rows,
                                     int64_t inner, Act act) {
  const int64_t chunks_per_row = inner / kVec, chunks = rows * chunks_per_row;
  for (int64_t chunk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = chunk / chunks_per_row, column = (chunk - row * chunks_per_row) * kVec;
    const bf16* gate = gate_up + row * 2 * inner + column;
    float g[kVec], u[kVec], o[kVec];
    load<kVec>(gate, g);
    load<kVec>(gate + inner, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] = act.forward(g[k], u[k]);
    store<kVec>(out + row * inner + column, o);
  }
}

// recomputed (may be null, may be dout itself): the forward's output written too, what the down projection's
// weight gradient reads, in the same pass over gate_up. Each thread reads its dout elements before writing the
// same elements of recomputed, so the two may alias (hence neither is __restrict__).
template <int kVec, typename Act>
__global__ void gated_backward_kernel(const bf16* dout, const bf16* __restrict__ gate_up,
                                      bf16* __restrict__ dgate_up, bf16* recomputed, int64_t rows, int64_t inner,
                                      Act act) {
  const int64_t chunks_per_row = inner / kVec, chunks = rows * chunks_per_row;
  for (int64_t chunk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = chunk / chunks_per_row, column = (chunk - row * chunks_per_row) * kVec;
    const int64_t gate_offset = row * 2 * inner + column;
    float g[kVec], u[kVec], d[kVec], dg[kVec], du[kVec];
    load<kVec>(gate_up + gate_offset, g);
    load<kVec>(gate_up + gate_offset + inner, u);
    load<kVec>(dout + row * inner + column, d);
#pragma unroll
    for (int k = 0; k < kVec; ++k) act.backward(g[k], u[k], d[k], dg[k], du[k]);
    store<kVec>(dgate_up + gate_offset, dg);
    store<kVec>(dgate_up + gate_offset + inner, du);
    if (recomputed) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) d[k] = act.forward(g[k], u[k]);
      store<kVec>(recomputed + row * inner + column, d);
    }
  }
}

// relu(x)², and its backward d·2·relu(x) (ops/relu_squared.h): one input column per output column, no gate.
template <int kVec>
__global__ void relu_squared_forward_kernel(const bf16* __restrict__ x, bf16* __restrict__ out, int64_t chunks) {
  for (int64_t chunk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += int64_t(gridDim.x) * blockDim.x) {
    float v[kVec];
    load<kVec>(x + chunk * kVec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float r = fmaxf(v[k], 0.0f);
      v[k] = r * r;
    }
    store<kVec>(out + chunk * kVec, v);
  }
}

template <int kVec>
__global__ void relu_squared_backward_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ x,
                                             bf16* __restrict__ dx, int64_t chunks) {
  for (int64_t chunk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += int64_t(gridDim.x) * blockDim.x) {
    float d[kVec], v[kVec];
    load<kVec>(dout + chunk * kVec, d);
    load<kVec>(x + chunk * kVec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d[k] *= 2.0f * fmaxf(v[k], 0.0f);
    store<kVec>(dx + chunk * kVec, d);
  }
}

bool vectorizable(int64_t inner, std::initializer_list<const void*> pointers) {
  if (inner % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

unsigned blocks_for(int64_t chunks) { return unsigned(std::min((chunks + kThreads - 1) / kThreads, kMaxBlocks)); }

template <typename Act>
cudaError_t launch_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, Act act, cudaStream_t stream) {
  if (rows == 0 || inner == 0) return cudaSuccess;
  const auto* in = static_cast<const bf16*>(gate_up);
  auto* o = static_cast<bf16*>(out);
  if (vectorizable(inner, {gate_up, out}))
    gated_forward_kernel<8><<<blocks_for(rows * inner / 8), kThreads, 0, stream>>>(in, o, rows, inner, act);
  else
    gated_forward_kernel<1><<<blocks_for(rows * inner), kThreads, 0, stream>>>(in, o, rows, inner, act);
  return cudaGetLastError();
}

template <typename Act>
cudaError_t launch_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                            int64_t inner, Act act, cudaStream_t stream) {
  if (rows == 0 || inner == 0) return cudaSuccess;
  const auto* d = static_cast<const bf16*>(dout);
  const auto* in = static_cast<const bf16*>(gate_up);
  auto* dg = static_cast<bf16*>(dgate_up);
  auto* r = static_cast<bf16*>(recomputed);
  if (vectorizable(inner, {dout, gate_up, dgate_up, recomputed}))
    gated_backward_kernel<8><<<blocks_for(rows * inner / 8), kThreads, 0, stream>>>(d, in, dg, r, rows, inner, act);
  else
    gated_backward_kernel<1><<<blocks_for(rows * inner), kThreads, 0, stream>>>(d, in, dg, r, rows, inner, act);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_relu_squared_forward(const void* x, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const auto* in = static_cast<const bf16*>(x);
  auto* o = static_cast<bf16*>(out);
  if (vectorizable(count, {x, out}))
    relu_squared_forward_kernel<8><<<blocks_for(count / 8), kThreads, 0, stream>>>(in, o, count / 8);
  else
    relu_squared_forward_kernel<1><<<blocks_for(count), kThreads, 0, stream>>>(in, o, count);
  return cudaGetLastError();
}

cudaError_t launch_relu_squared_backward(const void* dout, const void* x, void* dx, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const auto* d = static_cast<const bf16*>(dout);
  const auto* in = static_cast<const bf16*>(x);
  auto* g = static_cast<bf16*>(dx);
  if (vectorizable(count, {dout, x, dx}))
    relu_squared_backward_kernel<8><<<blocks_for(count / 8), kThreads, 0, stream>>>(d, in, g, count / 8);
  else
    relu_squared_backward_kernel<1><<<blocks_for(count), kThreads, 0, stream>>>(d, in, g, count);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, cudaStream_t stream) {
  return launch_forward(gate_up, out, rows, inner, Silu{}, stream);
}

cudaError_t launch_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                   int64_t inner, cudaStream_t stream) {
  return launch_backward(dout, gate_up, dgate_up, recomputed, rows, inner, Silu{}, stream);
}

cudaError_t launch_clamped_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, float alpha,
                                          float limit, cudaStream_t stream) {
  return launch_forward(gate_up, out, rows, inner, ClampedSilu{alpha, limit}, stream);
}

cudaError_t launch_clamped_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                                           int64_t rows, int64_t inner, float alpha, float limit, cudaStream_t stream) {
  return launch_backward(dout, gate_up, dgate_up, recomputed, rows, inner, ClampedSilu{alpha, limit}, stream);
}

}  // namespace moetune::ops::cuda
