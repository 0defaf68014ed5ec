// Cross-entropy with each row held on chip: a thread-block cluster of 2, 4 or 8 blocks per row (Hopper), each
// block loading its slice of the row into shared memory once while it accumulates the online-softmax partial,
// the blocks exchanging their partials through distributed shared memory, and each block then writing its
// slice's gradient from shared memory. DRAM sees one read and one write of the row, where one block per row
// (cross_entropy.cu) reads it twice: a 300 KB row does not fit one SM's 227 KB, and the second read of rows
// evicted from L2 between the passes was ~1/3 of that kernel's traffic (docs/benchmarks.md).
//
// Packed rows can have the slice loaded by one bulk copy (bulk_copy.cuh; kBulkLoad): the whole slice is then in
// flight at once and costs no registers, where the threads' own loads keep four 16-byte packs a thread in flight
// (32 registers is what four blocks of 512 threads a SM allow) and fetch a fifth after them: two DRAM round trips
// in a block's life of load, cluster barrier and write. The statistics are accumulated from shared memory in the
// threads' order, so both loads give the same bits.
#include <cooperative_groups.h>

#include <atomic>

#include "moetune/ops/cuda/bulk_copy.cuh"
#include "moetune/ops/cuda/cross_entropy_common.cuh"

namespace moetune::ops::cuda {
namespace {

namespace cg = cooperative_groups;

// Blocks of a cluster are consecutive in x: row = blockIdx.x / cluster size, slice = the block's rank.
template <int kWidth, int kThreads, bool kBulkLoad>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_cluster_rows_kernel(__nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                                      int64_t vocab, int slice_packs, float grad_scale, bool write_grad,
                                      float* __restrict__ row_losses, bool copy_early) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Pack<kWidth>* held = reinterpret_cast<Pack<kWidth>*>(shared_bytes);
  __shared__ MaxSum block_total;
  __shared__ float row_log_sum_exp;
  __shared__ uint64_t slice_loaded;  // kBulkLoad: completed by the copy's bytes

  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / blocks;
  const int64_t pack_count = vocab / kWidth;
  const int64_t begin = min(pack_count, int64_t(rank) * slice_packs);
  const int count = int(min(pack_count, begin + slice_packs) - begin);  // 0 for trailing ranks of tiny rows
  Pack<kWidth>* packs = reinterpret_cast<Pack<kWidth>*>(logits + row * vocab) + begin;
  const int32_t target = targets[row];
  const bool leader = rank == 0 && threadIdx.x == 0;  // writes the row's loss
  // kBulkLoad: thread 0 copies the slice into `held`, after the target says the row is scored or (copy_early)
  // before, taking the target's load off the block's path at the price of reading ignored rows for nothing.
  const auto start_copy = [&] {
    if constexpr (kBulkLoad) {
      static_assert(kWidth == 8, "bulk copies move 16-byte packs");
      bulk::barrier_init(&slice_loaded, 1);
      bulk::fence_barrier_init();
      if (count > 0) {
        bulk::arrive_expect_bytes(&slice_loaded, uint32_t(count) * uint32_t(sizeof(Pack<kWidth>)));
        bulk::copy_to_shared(held, packs, uint32_t(count) * uint32_t(sizeof(Pack<kWidth>)), &slice_loaded);
      }
    }
  };
  if (kBulkLoad && copy_early && threadIdx.x == 0) start_copy();

  if (unscored(target, vocab)) {
    if (leader) row_losses[row] = unscored_loss(target);
    if (write_grad)
      for (int p = threadIdx.x; p < count; p += kThreads) packs[p] = zero_pack<kWidth>();
    // A copy still landing in this block's shared memory keeps the block alive (its values are not used; the
    // zeros written meanwhile are what global memory keeps: the copy only reads it).
    if (kBulkLoad && copy_early && threadIdx.x == 0 && count > 0) bulk::wait(&slice_loaded, 0);
    return;  // uniform across the cluster: no block reaches the cluster barriers below
  }
  if (kBulkLoad && !copy_early && threadIdx.x == 0) start_copy();
  // Read before the cluster barrier, after which the row may be overwritten.
  const float target_logit = leader ? __bfloat162float(logits[row * vocab + target]) : 0.0f;

  MaxSum partial{-INFINITY, 0.0f};
  int p = threadIdx.x;
  if constexpr (kBulkLoad) {
    __syncthreads();  // the barrier is initialised before anyone waits on it
    if (count > 0) bulk::wait(&slice_loaded, 0);
    for (; p + 3 * kThreads < count; p += 4 * kThreads) {  // the same packs in the same order as below
      Pack<kWidth> four[4];
      for (int u = 0; u < 4; ++u) four[u] = held[p + u * kThreads];
      for (int u = 0; u < 4; ++u) accumulate(partial, four[u]);
    }
    for (; p < count; p += kThreads) accumulate(partial, held[p]);
  }
  for (; !kBulkLoad && p + 3 * kThreads < count; p += 4 * kThreads) {  // four 16-byte loads in flight per thread
    Pack<kWidth> loaded[4];
    for (int u = 0; u < 4; ++u) loaded[u] = packs[p + u * kThreads];
    for (int u = 0; u < 4; ++u) {
      held[p + u * kThreads] = loaded[u];
      accumulate(partial, loaded[u]);
    }
  }
  for (; !kBulkLoad && p < count; p += kThreads) {
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

template <int kWidth, int kThreads, bool kBulkLoad>
cudaError_t launch_kernel(void* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                          bool write_grad, float* row_losses, cudaStream_t stream, int cluster_blocks,
                          bool copy_early) {
  const int64_t pack_count = vocab / kWidth;
  const int64_t slice_packs = (pack_count + cluster_blocks - 1) / cluster_blocks;
  const size_t bytes = size_t(slice_packs) * sizeof(Pack<kWidth>);
  int device = 0, shared_limit = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess)
    status = cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (status != cudaSuccess) return status;
  constexpr int kStaticShared = 1024;  // block_merge's partials and the cluster's exchange, with room
  const int dynamic_limit = shared_limit - kStaticShared;
  if (bytes > size_t(dynamic_limit)) return cudaErrorNotSupported;
  if (rows * cluster_blocks > 0x7fffffff) return cudaErrorInvalidValue;

  const auto kernel = cross_entropy_cluster_rows_kernel<kWidth, kThreads, kBulkLoad>;
  static std::atomic<uint64_t> opted_in{0};
  status = allow_shared_memory_once(kernel, opted_in, device, dynamic_limit);
  if (status != cudaSuccess) return status;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(cluster_blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(rows * cluster_blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<__nv_bfloat16*>(logits), targets, vocab, int(slice_packs),
                            grad_scale, write_grad, row_losses, copy_early);
}

template <int kWidth, bool kBulkLoad>
cudaError_t launch_width(void* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                         bool write_grad, float* row_losses, cudaStream_t stream, CrossEntropyLaunch how) {
  if (how.threads == 256)
    return launch_kernel<kWidth, 256, kBulkLoad>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses,
                                                 stream, how.cluster_blocks, how.early_copy);
  if (how.threads == 512)
    return launch_kernel<kWidth, 512, kBulkLoad>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses,
                                                 stream, how.cluster_blocks, how.early_copy);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_cross_entropy_cluster_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                              float grad_scale, bool write_grad, float* row_losses,
                                              cudaStream_t stream, CrossEntropyLaunch how, bool packed) {
  if (how.cluster_blocks != 2 && how.cluster_blocks != 4 && how.cluster_blocks != 8) return cudaErrorInvalidValue;
  if (packed && how.stages > 1) {
    const cudaError_t status = launch_cross_entropy_streamed_rows(logits, targets, rows, vocab, grad_scale, write_grad,
                                                                  row_losses, stream, how);
    if (status != cudaErrorNotSupported) return status;  // else the slices' buffers do not fit: one buffer below
  }
  if (!packed) return launch_width<1, false>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream, how);
  return how.bulk_load
             ? launch_width<8, true>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream, how)
             : launch_width<8, false>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream, how);
}

}  // namespace moetune::ops::cuda
