// Cross-entropy with each row held on chip: a thread-block cluster of 2, 4 or 8 blocks per row (Hopper), each
// block loading its slice of the row into shared memory once while it accumulates the online-softmax partial,
// the blocks exchanging their partials through distributed shared memory, and each block then writing its
// slice's gradient from shared memory. DRAM sees one read and one write of the row, where one block per row
// (cross_entropy.cu) reads it twice: a 300 KB row does not fit one SM's 227 KB, and the second read of rows
// evicted from L2 between the passes was ~1/3 of that kernel's traffic (docs/benchmarks.md).
//
// Tried and slower on the H200 (session 12, branch s12-ce at 2a1c564, 2048-row chunks at 163840 columns, where
// this kernel takes 0.413 ms and a copy of the bytes 0.318): each block's slice loaded by one bulk copy
// (cp.async.bulk into shared memory, an mbarrier counting its bytes) instead of the threads' loads, 0.483 ms,
// also when the copy starts before the target is read; persistent clusters looping over rows with two to four
// slice buffers a block, the next row's slice bulk-copied in while the current one is merged and written,
// 0.523-0.645 ms (two blocks a SM at most, where this kernel keeps four). Same bits in every case. Session 22
// (cluster 8 x 512, 2048 rows): each thread's five packs held in registers as exponentials relative to the
// thread's maximum, one exponential per logit instead of two and no shared memory, 0.453 ms against this kernel's
// 0.412 at 163840 columns and 0.434 against 0.393 at 151936 (64 registers: two blocks a SM), and no faster in
// Moonlight's step; not kept.
#include <cooperative_groups.h>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/cross_entropy_common.cuh"

namespace moetune::ops::cuda {
namespace {

namespace cg = cooperative_groups;

// Blocks of a cluster are consecutive in x: row = blockIdx.x / cluster size, slice = the block's rank.
template <int kWidth, int kThreads>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_cluster_rows_kernel(__nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                                      int64_t vocab, int slice_packs, float grad_scale, bool write_grad,
                                      float* __restrict__ row_losses) {
  gpu::wait_for_previous_kernel();
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Pack<kWidth>* held = reinterpret_cast<Pack<kWidth>*>(shared_bytes);
  __shared__ MaxSum block_total;
  __shared__ float row_log_sum_exp;

  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / blocks;
  const int64_t pack_count = vocab / kWidth;
  const int64_t begin = min(pack_count, int64_t(rank) * slice_packs);
  const int count = int(min(pack_count, begin + slice_packs) - begin);  // 0 for trailing ranks of tiny rows
  Pack<kWidth>* packs = reinterpret_cast<Pack<kWidth>*>(logits + row * vocab) + begin;
  const int32_t target = targets[row];
  const bool leader = rank == 0 && threadIdx.x == 0;  // writes the row's loss

  if (unscored(target, vocab)) {
    if (leader) row_losses[row] = unscored_loss(target);
    if (write_grad)
      for (int p = threadIdx.x; p < count; p += kThreads) packs[p] = zero_pack<kWidth>();
    return;  // uniform across the cluster: no block reaches the cluster barriers below
  }
  // Read before the cluster barrier, after which the row may be overwritten.
  const float target_logit = leader ? __bfloat162float(logits[row * vocab + target]) : 0.0f;

  MaxSum partial{-INFINITY, 0.0f};
  int p = threadIdx.x;
  for (; p + 3 * kThreads < count; p += 4 * kThreads) {  // four 16-byte loads in flight per thread
    Pack<kWidth> loaded[4];
    for (int u = 0; u < 4; ++u) loaded[u] = packs[p + u * kThreads];
    for (int u = 0; u < 4; ++u) {
      held[p + u * kThreads] = loaded[u];
      accumulate(partial, loaded[u]);
    }
  }
  for (; p < count; p += kThreads) {
    const Pack<kWidth> pack = packs[p];
    held[p] = pack;
    accumulate(partial, pack);
  }
  const MaxSum total = block_merge<kThreads>(partial);
  if (threadIdx.x == 0) block_total = total;
  cluster.sync();  // every block's partial is published; no block has written its slice yet

  // Every block merges the same partials in the same order, so all hold the same logsumexp.
  if (threadIdx.x < 32) {
    const MaxSum theirs =
        int(threadIdx.x) < blocks ? *cluster.map_shared_rank(&block_total, int(threadIdx.x)) : MaxSum{-INFINITY, 0.0f};
    const MaxSum row_total = warp_merge(theirs);
    if (threadIdx.x == 0) row_log_sum_exp = row_total.max + logf(row_total.sum);
  }
  __syncthreads();
  cluster.barrier_arrive();  // this block is done reading the others' shared memory
  const float log_sum_exp = row_log_sum_exp;
  if (leader) row_losses[row] = log_sum_exp - target_logit;
  if (write_grad)
    for (p = threadIdx.x; p < count; p += kThreads)
      packs[p] = pack_gradient(held[p], (begin + p) * kWidth, target, log_sum_exp, grad_scale);
  cluster.barrier_wait();  // and no block exits while another may still read its partial
}

template <int kWidth, int kThreads>
cudaError_t launch_kernel(void* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                          bool write_grad, float* row_losses, cudaStream_t stream, int cluster_blocks) {
  const int64_t pack_count = vocab / kWidth;
  const int64_t slice_packs = (pack_count + cluster_blocks - 1) / cluster_blocks;
  const size_t bytes = size_t(slice_packs) * sizeof(Pack<kWidth>);
  int shared_limit = 0;
  cudaError_t status = gpu::dynamic_shared_memory_limit(shared_limit);
  if (status != cudaSuccess) return status;
  constexpr int kStaticShared = 1024;  // block_merge's partials and the cluster's exchange, with room
  if (bytes > size_t(shared_limit - kStaticShared)) return cudaErrorNotSupported;
  if (rows * cluster_blocks > 0x7fffffff) return cudaErrorInvalidValue;

  const auto kernel = cross_entropy_cluster_rows_kernel<kWidth, kThreads>;
  status = gpu::allow_dynamic_shared_memory(kernel);
  if (status != cudaSuccess) return status;
  cudaLaunchAttribute attributes[2] = {{}, gpu::dependent_launch_attribute()};
  cudaLaunchAttribute& cluster = attributes[0];
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(cluster_blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(rows * cluster_blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = gpu::dependent_launch_enabled() ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<__nv_bfloat16*>(logits), targets, vocab, int(slice_packs),
                            grad_scale, write_grad, row_losses);
}

template <int kWidth>
cudaError_t launch_width(void* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                         bool write_grad, float* row_losses, cudaStream_t stream, CrossEntropyLaunch how) {
  if (how.threads == 256)
    return launch_kernel<kWidth, 256>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream,
                                      how.cluster_blocks);
  if (how.threads == 512)
    return launch_kernel<kWidth, 512>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream,
                                      how.cluster_blocks);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_cross_entropy_cluster_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                              float grad_scale, bool write_grad, float* row_losses,
                                              cudaStream_t stream, CrossEntropyLaunch how, bool packed) {
  if (how.cluster_blocks != 2 && how.cluster_blocks != 4 && how.cluster_blocks != 8) return cudaErrorInvalidValue;
  return packed ? launch_width<8>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream, how)
                : launch_width<1>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream, how);
}

}  // namespace moetune::ops::cuda
