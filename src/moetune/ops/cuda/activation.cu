// SwiGLU and GPT-OSS's clamped SwiGLU, forward and backward, on a fused [gate | up] row, and Nemotron-H's
// ungated relu², fp32 math on BF16 storage. When the inner width and the pointers allow 16-byte accesses, SwiGLU
// runs gated_staged.cuh's kernels (several packs of 8 in flight a thread; kDefaultGatedKernel says how many);
// otherwise, and relu² always, a grid-stride over kVec-wide column chunks of every row, kVec = 8 (16-byte
// accesses) or 1.
#include <algorithm>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/activation_kernel_choice.h"
#include "moetune/ops/cuda/activation_kernels.h"
#include "moetune/ops/cuda/gated_activation.cuh"
#include "moetune/ops/cuda/gated_staged.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;
using gated::ClampedSilu;
using gated::Silu;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this: bounds the grid, not the work

// The one-pack kernels (GatedKernel packs 0): one kVec-wide chunk a thread per grid-stride step.
template <int kVec, typename Act>
__global__ void gated_forward_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ out, int64_t rows,
                                     int64_t inner, Act act) {
  gpu::wait_for_previous_kernel();
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
  gpu::wait_for_previous_kernel();
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
  gpu::wait_for_previous_kernel();
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
  gpu::wait_for_previous_kernel();
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

// The staged several-packs kernels, on 32-bit indices where they fit.
template <int kPacks, typename Act>
cudaError_t forward_packs(const void* gate_up, void* out, int64_t chunks, int64_t chunks_per_row, GatedKernel kernel,
                          Act act, cudaStream_t stream) {
  return gated::fits_32_bits(chunks, kPacks)
             ? gated::launch_forward_staged<kPacks, uint32_t>(gate_up, out, chunks, chunks_per_row, kernel.reversed,
                                                               act, stream)
             : gated::launch_forward_staged<kPacks, int64_t>(gate_up, out, chunks, chunks_per_row, kernel.reversed,
                                                              act, stream);
}

template <int kPacks, typename Act>
cudaError_t backward_packs(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t chunks,
                           int64_t chunks_per_row, GatedKernel kernel, Act act, cudaStream_t stream) {
  return gated::fits_32_bits(chunks, kPacks)
             ? gated::launch_backward_staged<kPacks, uint32_t>(dout, gate_up, dgate_up, recomputed, chunks,
                                                                chunks_per_row, kernel.reversed, act, stream)
             : gated::launch_backward_staged<kPacks, int64_t>(dout, gate_up, dgate_up, recomputed, chunks,
                                                               chunks_per_row, kernel.reversed, act, stream);
}

// kStaged false: the one-pack kernels only (the staged ones are not instantiated for that Act).
template <typename Act, bool kStaged = true>
cudaError_t launch_forward(GatedKernel kernel, const void* gate_up, void* out, int64_t rows, int64_t inner, Act act,
                           cudaStream_t stream) {
  if (rows == 0 || inner == 0) return cudaSuccess;
  const auto* in = static_cast<const bf16*>(gate_up);
  auto* o = static_cast<bf16*>(out);
  if (!vectorizable(inner, {gate_up, out})) {
    gpu::launch_dependent(gated_forward_kernel<1, Act>, blocks_for(rows * inner), kThreads, 0, stream, in, o, rows,
                          inner, act);
    return cudaGetLastError();
  }
  const int64_t chunks = rows * inner / 8, chunks_per_row = inner / 8;
  if (!kStaged || kernel.packs == 0) {
    gpu::launch_dependent(gated_forward_kernel<8, Act>, blocks_for(chunks), kThreads, 0, stream, in, o, rows, inner,
                          act);
    return cudaGetLastError();
  }
  if constexpr (kStaged) {
    switch (kernel.packs) {
      case 1:
        return forward_packs<1>(gate_up, out, chunks, chunks_per_row, kernel, act, stream);
      case 2:
        return forward_packs<2>(gate_up, out, chunks, chunks_per_row, kernel, act, stream);
      case 4:
        return forward_packs<4>(gate_up, out, chunks, chunks_per_row, kernel, act, stream);
    }
  }
  return cudaErrorInvalidValue;
}

template <typename Act, bool kStaged = true>
cudaError_t launch_backward(GatedKernel kernel, const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                            int64_t rows, int64_t inner, Act act, cudaStream_t stream) {
  if (rows == 0 || inner == 0) return cudaSuccess;
  const auto* d = static_cast<const bf16*>(dout);
  const auto* in = static_cast<const bf16*>(gate_up);
  auto* dg = static_cast<bf16*>(dgate_up);
  auto* r = static_cast<bf16*>(recomputed);
  if (!vectorizable(inner, {dout, gate_up, dgate_up, recomputed})) {
    gpu::launch_dependent(gated_backward_kernel<1, Act>, blocks_for(rows * inner), kThreads, 0, stream, d, in, dg, r,
                          rows, inner, act);
    return cudaGetLastError();
  }
  const int64_t chunks = rows * inner / 8, chunks_per_row = inner / 8;
  if (!kStaged || kernel.packs == 0) {
    gpu::launch_dependent(gated_backward_kernel<8, Act>, blocks_for(chunks), kThreads, 0, stream, d, in, dg, r, rows,
                          inner, act);
    return cudaGetLastError();
  }
  if constexpr (kStaged) {
    switch (kernel.packs) {
      case 1:
        return backward_packs<1>(dout, gate_up, dgate_up, recomputed, chunks, chunks_per_row, kernel, act, stream);
      case 2:
        return backward_packs<2>(dout, gate_up, dgate_up, recomputed, chunks, chunks_per_row, kernel, act, stream);
      case 4:
        return backward_packs<4>(dout, gate_up, dgate_up, recomputed, chunks, chunks_per_row, kernel, act, stream);
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_relu_squared_forward(const void* x, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const auto* in = static_cast<const bf16*>(x);
  auto* o = static_cast<bf16*>(out);
  if (vectorizable(count, {x, out}))
    gpu::launch_dependent(relu_squared_forward_kernel<8>, blocks_for(count / 8), kThreads, 0, stream, in, o, count / 8);
  else
    gpu::launch_dependent(relu_squared_forward_kernel<1>, blocks_for(count), kThreads, 0, stream, in, o, count);
  return cudaGetLastError();
}

cudaError_t launch_relu_squared_backward(const void* dout, const void* x, void* dx, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const auto* d = static_cast<const bf16*>(dout);
  const auto* in = static_cast<const bf16*>(x);
  auto* g = static_cast<bf16*>(dx);
  if (vectorizable(count, {dout, x, dx}))
    gpu::launch_dependent(relu_squared_backward_kernel<8>, blocks_for(count / 8), kThreads, 0, stream, d, in, g,
                          count / 8);
  else
    gpu::launch_dependent(relu_squared_backward_kernel<1>, blocks_for(count), kThreads, 0, stream, d, in, g, count);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, cudaStream_t stream) {
  return launch_forward(kDefaultGatedKernel, gate_up, out, rows, inner, Silu{}, stream);
}

cudaError_t launch_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                   int64_t inner, cudaStream_t stream) {
  return launch_backward(kDefaultGatedKernel, dout, gate_up, dgate_up, recomputed, rows, inner, Silu{}, stream);
}

cudaError_t launch_clamped_swiglu_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, float alpha,
                                          float limit, cudaStream_t stream) {
  return launch_forward(kDefaultGatedKernel, gate_up, out, rows, inner, ClampedSilu{alpha, limit}, stream);
}

cudaError_t launch_clamped_swiglu_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                                           int64_t rows, int64_t inner, float alpha, float limit, cudaStream_t stream) {
  return launch_backward(kDefaultGatedKernel, dout, gate_up, dgate_up, recomputed, rows, inner,
                         ClampedSilu{alpha, limit}, stream);
}

namespace {

// The one-pack grid-stride kernels for a gate other than SiLU (GatedKernel packs 0).
template <typename Gate>
cudaError_t plain_forward(const void* gate_up, void* out, int64_t rows, int64_t inner, cudaStream_t stream) {
  return launch_forward<gated::GatedBy<Gate>, /*kStaged=*/false>(GatedKernel{}, gate_up, out, rows, inner, {}, stream);
}
template <typename Gate>
cudaError_t plain_backward(const void* dout, const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                           int64_t inner, cudaStream_t stream) {
  return launch_backward<gated::GatedBy<Gate>, /*kStaged=*/false>(GatedKernel{}, dout, gate_up, dgate_up, recomputed,
                                                                  rows, inner, {}, stream);
}

}  // namespace

cudaError_t launch_gated_forward(KernelGate gate, const void* gate_up, void* out, int64_t rows, int64_t inner,
                                 cudaStream_t stream) {
  switch (gate) {
    case KernelGate::Silu:
      return launch_swiglu_forward(gate_up, out, rows, inner, stream);
    case KernelGate::Gelu:
      return plain_forward<gated::GeluGate>(gate_up, out, rows, inner, stream);
    case KernelGate::GeluTanh:
      return plain_forward<gated::GeluTanhGate>(gate_up, out, rows, inner, stream);
    case KernelGate::QuickGelu:
      return plain_forward<gated::QuickGeluGate>(gate_up, out, rows, inner, stream);
    case KernelGate::Relu:
      return plain_forward<gated::ReluGate>(gate_up, out, rows, inner, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_gated_backward(KernelGate gate, const void* dout, const void* gate_up, void* dgate_up,
                                  void* recomputed, int64_t rows, int64_t inner, cudaStream_t stream) {
  switch (gate) {
    case KernelGate::Silu:
      return launch_swiglu_backward(dout, gate_up, dgate_up, recomputed, rows, inner, stream);
    case KernelGate::Gelu:
      return plain_backward<gated::GeluGate>(dout, gate_up, dgate_up, recomputed, rows, inner, stream);
    case KernelGate::GeluTanh:
      return plain_backward<gated::GeluTanhGate>(dout, gate_up, dgate_up, recomputed, rows, inner, stream);
    case KernelGate::QuickGelu:
      return plain_backward<gated::QuickGeluGate>(dout, gate_up, dgate_up, recomputed, rows, inner, stream);
    case KernelGate::Relu:
      return plain_backward<gated::ReluGate>(dout, gate_up, dgate_up, recomputed, rows, inner, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_gated_forward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* gate_up,
                                      void* out, int64_t rows, int64_t inner, cudaStream_t stream) {
  return clamped ? launch_forward(kernel, gate_up, out, rows, inner, ClampedSilu{alpha, limit}, stream)
                 : launch_forward(kernel, gate_up, out, rows, inner, Silu{}, stream);
}

cudaError_t launch_gated_backward_with(GatedKernel kernel, bool clamped, float alpha, float limit, const void* dout,
                                       const void* gate_up, void* dgate_up, void* recomputed, int64_t rows,
                                       int64_t inner, cudaStream_t stream) {
  return clamped ? launch_backward(kernel, dout, gate_up, dgate_up, recomputed, rows, inner,
                                   ClampedSilu{alpha, limit}, stream)
                 : launch_backward(kernel, dout, gate_up, dgate_up, recomputed, rows, inner, Silu{}, stream);
}

}  // namespace moetune::ops::cuda
