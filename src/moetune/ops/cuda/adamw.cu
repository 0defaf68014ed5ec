// Fused multi-tensor AdamW (torch.optim.AdamW: decoupled weight decay, bias correction), one pass over each
// element: gradient scale, decay, both moments, the update, and the rounding back into storage. The per-element
// arithmetic is train::AdamW's, in the same order, in fp32.
//
// The step is memory-bound; bytes moved per element:
//   F32Master: reads grad 2 + master 4 + exp_avg 4 + exp_avg_sq 4, writes master 4 + moments 8 + param 2 = 28 B
//   bf16 modes: reads param, grad, exp_avg, exp_avg_sq (2 B each), writes param and both moments = 14 B
// so 3.1 B parameters take ~20 ms (fp32 master) or ~10 ms (bf16) at the H200's ~4.3 TB/s.
#include "moetune/core/half.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

struct AdamWTable {
  static constexpr int kMaxTensors = 384;
  AdamWTensorPointers tensors[kMaxTensors];
  int64_t chunk_end[kMaxTensors];
  int64_t position[kMaxTensors];  // index in the caller's list: keys the stochastic rounding of that tensor
  int count;
  int64_t total_chunks;
};
static_assert(sizeof(AdamWTable) + sizeof(AdamWScalars) + sizeof(const float*) <=
              multi_tensor::kMaxKernelParameterBytes);

// splitmix64's finaliser: a bijection whose output bits all depend on all input bits.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Counter-based randomness: the same (seed, step, tensor, element) always gives the same bits, whatever the
// launch geometry, so a run with stochastic rounding is reproducible and resumable.
__device__ __forceinline__ uint64_t tensor_key(uint64_t seed, int64_t step, int64_t position) {
  return mix64(seed ^ mix64(uint64_t(step) * kGolden ^ mix64(uint64_t(position) + kGolden)));
}
__device__ __forceinline__ uint64_t element_random(uint64_t key, int64_t index) {
  return mix64(key + uint64_t(index) * kGolden);
}

// Rounds up with probability equal to the dropped fraction of an ulp (adds 16 random bits below the kept ones,
// then truncates), so E[round(x)] = x and updates far below half an ulp still move the value on average.
// NaN keeps the nearest-even path, which keeps it a NaN.
__device__ __forceinline__ uint16_t f32_to_bf16_stochastic(float f, uint32_t random16) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return f32_to_bf16(f);
  return uint16_t((bits + random16) >> 16);
}

__device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  p *= s.decay;  // decoupled weight decay, before the moments, as torch does
  m += (g - m) * s.one_minus_beta1;
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  p -= s.step_size * m / (sqrtf(v) / s.sqrt_correction2 + s.eps);
}

// Loads and stores of kWidth consecutive elements: 8 with 16-byte accesses (the caller guarantees alignment),
// or 1.
template <int kWidth>
__device__ __forceinline__ void load_bf16(const uint16_t* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const uint4 packed = *reinterpret_cast<const uint4*>(source);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = bf16_to_f32(uint16_t(words[k] & 0xffffu));
      out[2 * k + 1] = bf16_to_f32(uint16_t(words[k] >> 16));
    }
  } else {
    out[0] = bf16_to_f32(*source);
  }
}

template <int kWidth>
__device__ __forceinline__ void store_bf16(uint16_t* destination, const uint16_t (&bits)[kWidth]) {
  if constexpr (kWidth == 8) {
    uint4 packed;
    packed.x = uint32_t(bits[0]) | (uint32_t(bits[1]) << 16);
    packed.y = uint32_t(bits[2]) | (uint32_t(bits[3]) << 16);
    packed.z = uint32_t(bits[4]) | (uint32_t(bits[5]) << 16);
    packed.w = uint32_t(bits[6]) | (uint32_t(bits[7]) << 16);
    *reinterpret_cast<uint4*>(destination) = packed;
  } else {
    *destination = bits[0];
  }
}

template <int kWidth>
__device__ __forceinline__ void load_f32(const float* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const float4 low = reinterpret_cast<const float4*>(source)[0], high = reinterpret_cast<const float4*>(source)[1];
    out[0] = low.x, out[1] = low.y, out[2] = low.z, out[3] = low.w;
    out[4] = high.x, out[5] = high.y, out[6] = high.z, out[7] = high.w;
  } else {
    out[0] = *source;
  }
}

template <int kWidth>
__device__ __forceinline__ void store_f32(float* destination, const float (&values)[kWidth]) {
  if constexpr (kWidth == 8) {
    reinterpret_cast<float4*>(destination)[0] = make_float4(values[0], values[1], values[2], values[3]);
    reinterpret_cast<float4*>(destination)[1] = make_float4(values[4], values[5], values[6], values[7]);
  } else {
    *destination = values[0];
  }
}

// Updates elements [index, index + kWidth) of one tensor.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void update_elements(const AdamWTensorPointers& t, int64_t index, float grad_scale,
                                                const AdamWScalars& s, uint64_t key) {
  float p[kWidth], g[kWidth], m[kWidth], v[kWidth];
  load_bf16<kWidth>(t.grad + index, g);
  if constexpr (kStorage == AdamWStorage::F32Master) {
    load_f32<kWidth>(t.master + index, p);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg) + index, m);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg_sq) + index, v);
  } else {
    load_bf16<kWidth>(t.param + index, p);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg) + index, m);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg_sq) + index, v);
  }
#pragma unroll
  for (int k = 0; k < kWidth; ++k) adamw_update(p[k], g[k] * grad_scale, m[k], v[k], s);

  uint16_t p_bits[kWidth];
  if constexpr (kStorage == AdamWStorage::F32Master) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) p_bits[k] = f32_to_bf16(p[k]);
    store_f32<kWidth>(t.master + index, p);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg) + index, m);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg_sq) + index, v);
  } else {
    uint16_t m_bits[kWidth], v_bits[kWidth];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
        // One 64-bit draw gives three independent 16-bit roundings.
        const uint64_t random = element_random(key, index + k);
        p_bits[k] = f32_to_bf16_stochastic(p[k], uint32_t(random & 0xffffu));
        m_bits[k] = f32_to_bf16_stochastic(m[k], uint32_t((random >> 16) & 0xffffu));
        v_bits[k] = f32_to_bf16_stochastic(v[k], uint32_t((random >> 32) & 0xffffu));
      } else {
        p_bits[k] = f32_to_bf16(p[k]);
        m_bits[k] = f32_to_bf16(m[k]);
        v_bits[k] = f32_to_bf16(v[k]);
      }
    }
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg) + index, m_bits);
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg_sq) + index, v_bits);
  }
  store_bf16<kWidth>(t.param + index, p_bits);
}

template <AdamWStorage kStorage>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_kernel(const __grid_constant__ AdamWTable table, const AdamWScalars scalars,
                 const float* __restrict__ grad_scale) {
  constexpr int kVector = multi_tensor::kVectorElements;
  const float scale = grad_scale ? *grad_scale : 1.0f;
  for (int64_t chunk = blockIdx.x; chunk < table.total_chunks; chunk += gridDim.x) {
    const int tensor = multi_tensor::tensor_of_chunk(table.chunk_end, table.count, chunk);
    const AdamWTensorPointers& t = table.tensors[tensor];
    const multi_tensor::Range range = multi_tensor::chunk_range(table.chunk_end, tensor, chunk, t.numel);
    const uint64_t key = kStorage == AdamWStorage::Bf16StochasticRounding
                             ? tensor_key(scalars.seed, scalars.step, table.position[tensor])
                             : 0;
    int64_t scalar_begin = range.begin;
    if (multi_tensor::all_aligned_16(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.master)) {
      const int64_t vector_end = range.begin + (range.end - range.begin) / kVector * kVector;
      for (int64_t i = range.begin + int64_t(threadIdx.x) * kVector; i < vector_end; i += int64_t(blockDim.x) * kVector)
        update_elements<kStorage, kVector>(t, i, scale, scalars, key);
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < range.end; i += blockDim.x)
      update_elements<kStorage, 1>(t, i, scale, scalars, key);
  }
}

template <AdamWStorage kStorage>
cudaError_t launch_table(const AdamWTable& table, const AdamWScalars& scalars, const float* grad_scale,
                         cudaStream_t stream) {
  int max_blocks = 0;
  if (cudaError_t status = multi_tensor::resident_blocks(adamw_kernel<kStorage>, max_blocks); status != cudaSuccess)
    return status;
  const int blocks = int(std::min<int64_t>(table.total_chunks, max_blocks));
  adamw_kernel<kStorage><<<blocks, multi_tensor::kThreads, 0, stream>>>(table, scalars, grad_scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, cudaStream_t stream) {
  return multi_tensor::launch_in_batches<AdamWTable>(
      count, [&](int64_t index) { return tensors[index].numel; },
      [&](AdamWTable& table, int slot, int64_t index) {
        table.tensors[slot] = tensors[index];
        table.position[slot] = index;
      },
      [&](const AdamWTable& table) -> cudaError_t {
        switch (storage) {
          case AdamWStorage::F32Master:
            return launch_table<AdamWStorage::F32Master>(table, scalars, grad_scale, stream);
          case AdamWStorage::Bf16StochasticRounding:
            return launch_table<AdamWStorage::Bf16StochasticRounding>(table, scalars, grad_scale, stream);
          case AdamWStorage::Bf16NearestRounding:
            return launch_table<AdamWStorage::Bf16NearestRounding>(table, scalars, grad_scale, stream);
        }
        return cudaErrorInvalidValue;
      });
}

}  // namespace moetune::ops::cuda
