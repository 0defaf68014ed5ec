// Fused multi-tensor AdamW (torch.optim.AdamW: decoupled weight decay, bias correction), one pass over each
// element: gradient scale, decay, both moments, the update, and the rounding back into storage. The per-element
// arithmetic is train::AdamW's (ops/adamw_math.h), in fp32.
//
// The step is memory-bound; bytes moved per element:
//   F32Master: reads grad 2 + master 4 + exp_avg 4 + exp_avg_sq 4, writes master 4 + moments 8 + param 2 = 28 B
//   bf16 modes: reads param, grad, exp_avg, exp_avg_sq (2 B each), writes param and both moments = 14 B
// so 3.1 B parameters take ~20 ms (fp32 master) or ~10 ms (bf16) at the H200's ~4.3 TB/s.
#include <cstdlib>

#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/adamw_elements.cuh"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/adamw_staged.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

using AdamWTable = AdamWTableOf<AdamWTensorPointers, 384>;
static_assert(sizeof(AdamWTable) + sizeof(AdamWScalars) + 2 * sizeof(const float*) + sizeof(AdamWStaging) <=
              multi_tensor::kMaxKernelParameterBytes);

// kMinBlocks: blocks of 256 threads each SM should hold (0: as many as the compiler's register use allows: 48
// registers, 5 blocks, with hardware rounding and the skip). Measured on the H200 over the reference job's slots
// (OptimizerAccessGpu.DISABLED_TimesReferenceJobSlots): capping the registers at 40 for 6 blocks spills and is
// slower (12.6 ms against 11.4), and so is loading 2 or 4 vectors a thread before computing (116 and 169
// registers: 14.9 and 24.0 ms against 11.4); the slot list itself costs nothing (one tensor of the same size:
// 11.35 ms). With norm_partials, each warp's Σ g² of each chunk goes there too. The way past those limits is to
// keep the bytes in flight out of registers: adamw_staged.cuh's kernel (AdamWAccess::stages; the default for fp32
// master weights, whose 28 B an element the register kernel moves at a third of the copy's rate).
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kMinBlocks>
__global__ void __launch_bounds__(multi_tensor::kThreads, kMinBlocks)
    adamw_kernel(const __grid_constant__ AdamWTable table, float* __restrict__ norm_partials,
                 const AdamWScalars scalars, const float* __restrict__ grad_scale) {
  gpu::wait_for_previous_kernel();
  constexpr int kVector = multi_tensor::kVectorElements;
  const float scale = grad_scale ? *grad_scale : 1.0f;
  for_each_chunk<kStorage>(table, scalars, norm_partials, [&](const AdamWTensorPointers& t, multi_tensor::Range range,
                                                              uint64_t key) {
    float squares = 0.0f;
    int64_t scalar_begin = range.begin;
    if (multi_tensor::all_aligned_16(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.master)) {
      const int64_t vector_end = range.begin + (range.end - range.begin) / kVector * kVector;
      for (int64_t i = range.begin + int64_t(threadIdx.x) * kVector; i < vector_end; i += int64_t(blockDim.x) * kVector)
        update_elements<kStorage, kHardwareRounding, kSkipUntouched, kVector>(t, i, scale, scalars, key, squares);
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < range.end; i += blockDim.x)
      update_elements<kStorage, kHardwareRounding, kSkipUntouched, 1>(t, i, scale, scalars, key, squares);
    return squares;
  });
}

// The access the process starts with: AdamWAccess's defaults, or for measuring and bisecting a kernel choice in a
// whole run, MOETUNE_ADAMW_STAGES from the environment (0: the defaults; 2..kAdamWMaxStages: the staged kernel at
// that depth in every precision; anything else fails the step with cudaErrorInvalidValue).
AdamWAccess initial_access() {
  AdamWAccess access;
  const char* stages = std::getenv("MOETUNE_ADAMW_STAGES");
  if (stages == nullptr) return access;
  char* end = nullptr;
  const long value = std::strtol(stages, &end, 10);
  const bool valid = end != stages && *end == '\0' && (value == 0 || (value >= 2 && value <= kAdamWMaxStages));
  access.stages = valid ? int(value) : kAdamWMaxStages + 1;  // past the limit: launch_adamw refuses it
  return access;
}

AdamWAccess g_access = initial_access();  // set_adamw_access

template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched>
auto kernel_with(int min_blocks) {
  return min_blocks == 6 ? adamw_kernel<kStorage, kHardwareRounding, kSkipUntouched, 6>
                         : adamw_kernel<kStorage, kHardwareRounding, kSkipUntouched, 0>;
}

template <AdamWStorage kStorage>
auto kernel_for(AdamWAccess access) {
  if (!access.skip_untouched) return kernel_with<kStorage, false, false>(access.min_blocks_per_sm);
  return access.hardware_rounding ? kernel_with<kStorage, true, true>(access.min_blocks_per_sm)
                                  : kernel_with<kStorage, false, true>(access.min_blocks_per_sm);
}

template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched>
auto staged_kernel_with(int min_blocks) {
  return min_blocks == 3 ? adamw_staged_kernel<kStorage, kHardwareRounding, kSkipUntouched, 3, AdamWTable>
                         : adamw_staged_kernel<kStorage, kHardwareRounding, kSkipUntouched, 0, AdamWTable>;
}

template <AdamWStorage kStorage>
auto staged_kernel_for(AdamWAccess access) {
  auto kernel = staged_kernel_with<kStorage, false, false>(access.min_blocks_per_sm);
  if (access.skip_untouched)
    kernel = access.hardware_rounding ? staged_kernel_with<kStorage, true, true>(access.min_blocks_per_sm)
                                      : staged_kernel_with<kStorage, false, true>(access.min_blocks_per_sm);
  return ShapedKernel<decltype(kernel)>{kernel, kStagedThreads, access.stages * StagedTile<kStorage>::kBytes};
}

}  // namespace

cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, float* norm_partials,
                         cudaStream_t stream, int64_t first_position) {
  AdamWAccess access = g_access;
  if (access.stages < 2 && storage == AdamWStorage::F32Master) access.stages = access.f32_master_stages;
  if (access.stages < 2)
    return launch_adamw_tables<AdamWTable>(
        storage, tensors, count, first_position,
        [&](auto storage_constant) { return kernel_for<decltype(storage_constant)::value>(access); }, norm_partials,
        stream, scalars, grad_scale);
  if (access.stages > kAdamWMaxStages) return cudaErrorInvalidValue;
  return launch_adamw_tables<AdamWTable>(
      storage, tensors, count, first_position,
      [&](auto storage_constant) { return staged_kernel_for<decltype(storage_constant)::value>(access); },
      norm_partials, stream, scalars, grad_scale, AdamWStaging{access.stages, access.evict_first});
}

int64_t adamw_norm_partial_count(const int64_t* numels, int64_t count) {
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) chunks += numels[i] > 0 ? multi_tensor::chunk_count(numels[i]) : 0;
  return chunks * kAdamWNormPartialsPerChunk;
}

void set_adamw_access(AdamWAccess access) { g_access = access; }
AdamWAccess adamw_access() { return g_access; }

}  // namespace moetune::ops::cuda
