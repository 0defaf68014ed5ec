// Fused multi-tensor AdamW (torch.optim.AdamW: decoupled weight decay, bias correction), one pass over each
// element: gradient scale, decay, both moments, the update, and the rounding back into storage. The per-element
// arithmetic is train::AdamW's (ops/adamw_math.h), in fp32.
//
// The step is memory-bound; bytes moved per element:
//   F32Master: reads grad 2 + master 4 + exp_avg 4 + exp_avg_sq 4, writes master 4 + moments 8 + param 2 = 28 B
//   bf16 modes: reads param, grad, exp_avg, exp_avg_sq (2 B each), writes param and both moments = 14 B
// so 3.1 B parameters take ~20 ms (fp32 master) or ~10 ms (bf16) at the H200's ~4.3 TB/s.
#include "moetune/core/half.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

using AdamWTable = AdamWTableOf<AdamWTensorPointers, 384>;
static_assert(sizeof(AdamWTable) + sizeof(AdamWScalars) + 2 * sizeof(const float*) <=
              multi_tensor::kMaxKernelParameterBytes);

// 16-byte accesses, plain or streaming (evict-first: every byte of the step is touched once, so caching it for
// reuse only displaces lines that other accesses could use).
template <bool kStreaming, typename T>
__device__ __forceinline__ T load_16(const void* source) {
  if constexpr (kStreaming) return __ldcs(reinterpret_cast<const T*>(source));
  else return *reinterpret_cast<const T*>(source);
}
template <bool kStreaming, typename T>
__device__ __forceinline__ void store_16(void* destination, const T& value) {
  if constexpr (kStreaming) __stcs(reinterpret_cast<T*>(destination), value);
  else *reinterpret_cast<T*>(destination) = value;
}

// Loads and stores of kWidth consecutive elements: 8 with 16-byte accesses (the caller guarantees alignment),
// or 1.
template <int kWidth, bool kStreaming>
__device__ __forceinline__ void load_bf16(const uint16_t* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const uint4 packed = load_16<kStreaming, uint4>(source);
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

template <int kWidth, bool kStreaming>
__device__ __forceinline__ void store_bf16(uint16_t* destination, const uint16_t (&bits)[kWidth]) {
  if constexpr (kWidth == 8) {
    uint4 packed;
    packed.x = uint32_t(bits[0]) | (uint32_t(bits[1]) << 16);
    packed.y = uint32_t(bits[2]) | (uint32_t(bits[3]) << 16);
    packed.z = uint32_t(bits[4]) | (uint32_t(bits[5]) << 16);
    packed.w = uint32_t(bits[6]) | (uint32_t(bits[7]) << 16);
    store_16<kStreaming>(destination, packed);
  } else {
    *destination = bits[0];
  }
}

template <int kWidth, bool kStreaming>
__device__ __forceinline__ void load_f32(const float* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const float4 low = load_16<kStreaming, float4>(source), high = load_16<kStreaming, float4>(source + 4);
    out[0] = low.x, out[1] = low.y, out[2] = low.z, out[3] = low.w;
    out[4] = high.x, out[5] = high.y, out[6] = high.z, out[7] = high.w;
  } else {
    out[0] = *source;
  }
}

template <int kWidth, bool kStreaming>
__device__ __forceinline__ void store_f32(float* destination, const float (&values)[kWidth]) {
  if constexpr (kWidth == 8) {
    store_16<kStreaming>(destination, make_float4(values[0], values[1], values[2], values[3]));
    store_16<kStreaming>(destination + 4, make_float4(values[4], values[5], values[6], values[7]));
  } else {
    *destination = values[0];
  }
}

// The state of kWidth consecutive elements in registers, as fp32.
template <int kWidth>
struct Elements {
  float p[kWidth], g[kWidth], m[kWidth], v[kWidth];
};

template <AdamWStorage kStorage, int kWidth, bool kStreaming>
__device__ __forceinline__ void load_elements(const AdamWTensorPointers& t, int64_t index, Elements<kWidth>& e) {
  load_bf16<kWidth, kStreaming>(t.grad + index, e.g);
  if constexpr (kStorage == AdamWStorage::F32Master) {
    load_f32<kWidth, kStreaming>(t.master + index, e.p);
    load_f32<kWidth, kStreaming>(static_cast<const float*>(t.exp_avg) + index, e.m);
    load_f32<kWidth, kStreaming>(static_cast<const float*>(t.exp_avg_sq) + index, e.v);
  } else {
    load_bf16<kWidth, kStreaming>(t.param + index, e.p);
    load_bf16<kWidth, kStreaming>(static_cast<const uint16_t*>(t.exp_avg) + index, e.m);
    load_bf16<kWidth, kStreaming>(static_cast<const uint16_t*>(t.exp_avg_sq) + index, e.v);
  }
}

// Updates elements [index, index + kWidth) of one tensor, loaded in `e`, and stores them.
template <AdamWStorage kStorage, int kWidth, bool kStreaming>
__device__ __forceinline__ void update_and_store(const AdamWTensorPointers& t, int64_t index, Elements<kWidth>& e,
                                                 float grad_scale, const AdamWScalars& s, uint64_t key) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k) adamw_element(e.p[k], e.g[k] * grad_scale, e.m[k], e.v[k], s.constants);

  uint16_t p_bits[kWidth];
  if constexpr (kStorage == AdamWStorage::F32Master) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) p_bits[k] = f32_to_bf16(e.p[k]);
    store_f32<kWidth, kStreaming>(t.master + index, e.p);
    store_f32<kWidth, kStreaming>(static_cast<float*>(t.exp_avg) + index, e.m);
    store_f32<kWidth, kStreaming>(static_cast<float*>(t.exp_avg_sq) + index, e.v);
  } else {
    uint16_t m_bits[kWidth], v_bits[kWidth];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
        // One 64-bit draw gives three independent 16-bit roundings.
        const uint64_t random = element_random(key, index + k);
        p_bits[k] = f32_to_bf16_stochastic(e.p[k], uint32_t(random & 0xffffu));
        m_bits[k] = f32_to_bf16_stochastic(e.m[k], uint32_t((random >> 16) & 0xffffu));
        v_bits[k] = f32_to_bf16_stochastic(e.v[k], uint32_t((random >> 32) & 0xffffu));
      } else {
        p_bits[k] = f32_to_bf16(e.p[k]);
        m_bits[k] = f32_to_bf16(e.m[k]);
        v_bits[k] = f32_to_bf16(e.v[k]);
      }
    }
    store_bf16<kWidth, kStreaming>(static_cast<uint16_t*>(t.exp_avg) + index, m_bits);
    store_bf16<kWidth, kStreaming>(static_cast<uint16_t*>(t.exp_avg_sq) + index, v_bits);
  }
  store_bf16<kWidth, kStreaming>(t.param + index, p_bits);
}

// Each thread loads kInFlight vectors (blockDim.x vectors apart) before it computes any, so that many 16-byte
// loads per thread are outstanding at once; the stores follow. With norm_partials, each warp's Σ g² of each chunk
// goes there too (the elements in the same order for every kInFlight, so the same bits).
template <AdamWStorage kStorage, int kInFlight, bool kStreaming>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_kernel(const __grid_constant__ AdamWTable table, float* __restrict__ norm_partials,
                 const AdamWScalars scalars, const float* __restrict__ grad_scale) {
  constexpr int kVector = multi_tensor::kVectorElements;
  const float scale = grad_scale ? *grad_scale : 1.0f;
  const auto add_squares = [](const auto& g, float& squares) {
#pragma unroll
    for (float value : g) squares += value * value;
  };
  for_each_chunk<kStorage>(table, scalars, norm_partials, [&](const AdamWTensorPointers& t, multi_tensor::Range range,
                                                              uint64_t key) {
    float squares = 0.0f;
    int64_t scalar_begin = range.begin;
    if (multi_tensor::all_aligned_16(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.master)) {
      const int64_t vector_end = range.begin + (range.end - range.begin) / kVector * kVector;
      const int64_t stride = int64_t(blockDim.x) * kVector;
      for (int64_t first = range.begin + int64_t(threadIdx.x) * kVector; first < vector_end;
           first += stride * kInFlight) {
        Elements<kVector> e[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
          if (first + u * stride < vector_end) load_elements<kStorage, kVector, kStreaming>(t, first + u * stride, e[u]);
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
          if (first + u * stride < vector_end) {
            add_squares(e[u].g, squares);
            update_and_store<kStorage, kVector, kStreaming>(t, first + u * stride, e[u], scale, scalars, key);
          }
      }
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < range.end; i += blockDim.x) {
      Elements<1> e;
      load_elements<kStorage, 1, false>(t, i, e);
      add_squares(e.g, squares);
      update_and_store<kStorage, 1, false>(t, i, e, scale, scalars, key);
    }
    return squares;
  });
}

AdamWAccess g_access;  // set_adamw_access

template <AdamWStorage kStorage, int kInFlight>
auto kernel_with(bool streaming) {
  return streaming ? adamw_kernel<kStorage, kInFlight, true> : adamw_kernel<kStorage, kInFlight, false>;
}

template <AdamWStorage kStorage>
auto kernel_for(AdamWAccess access) {
  switch (access.vectors_in_flight) {
    case 2: return kernel_with<kStorage, 2>(access.streaming);
    case 4: return kernel_with<kStorage, 4>(access.streaming);
    default: return kernel_with<kStorage, 1>(access.streaming);
  }
}

}  // namespace

cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, float* norm_partials,
                         cudaStream_t stream) {
  return launch_adamw_tables<AdamWTable>(
      storage, tensors, count,
      [](auto storage_constant) { return kernel_for<decltype(storage_constant)::value>(g_access); }, norm_partials,
      stream, scalars, grad_scale);
}

int64_t adamw_norm_partial_count(const int64_t* numels, int64_t count) {
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) chunks += numels[i] > 0 ? multi_tensor::chunk_count(numels[i]) : 0;
  return chunks * kAdamWNormPartialsPerChunk;
}

void set_adamw_access(AdamWAccess access) { g_access = access; }
AdamWAccess adamw_access() { return g_access; }

}  // namespace moetune::ops::cuda
