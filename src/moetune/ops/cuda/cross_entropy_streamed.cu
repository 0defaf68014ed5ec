// Cross-entropy with rows streamed through persistent thread-block clusters (Hopper): as many clusters as fit at
// once each loop over rows (cluster c takes rows c, c + clusters, ...), every block keeping its slice of the row
// in shared memory as the held kernel (cross_entropy_cluster.cu) does, but with `stages` buffers: while a block
// merges one row's partials across the cluster and writes that row's gradient, the copy unit (bulk_copy.cuh) is
// already loading the slices of the next rows into the other buffers. In the held kernel the load is the block's
// own threads' work and every block of a launch wave runs load, cluster barrier, write in turn (and a new cluster
// waits for eight free block slots in one GPC): there the pass ran at ~2.9 TB/s in the step where a copy of the
// same bytes reaches ~4.3 (docs/benchmarks.md).
//
// Bit for bit the held kernel's results at the same cluster size and block width: each block's slice, each
// thread's packs and their order, the block merge and the cluster merge (every block merging the ranks' partials
// in rank order) are the same; only where the values come from (a copy into shared memory, not the threads' own
// loads) changed. Only packed rows (16-byte aligned multiples of 8 values) come here: the copies need it.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <tuple>
#include <vector>

#include "moetune/ops/cuda/bulk_copy.cuh"
#include "moetune/ops/cuda/cross_entropy_common.cuh"

namespace moetune::ops::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWidth = 8;
using RowPack = Pack<kWidth>;
constexpr int kMaxStages = 4;

// Blocks of a cluster are consecutive in x; the grid holds `clusters` clusters, each looping over its rows.
// Two blocks a SM (the launch bounds' 2) is what two stages of a 41 KB slice allow at Moonlight's vocabulary.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, 2)
    cross_entropy_streamed_rows_kernel(__nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                                       int64_t rows, int64_t vocab, int slice_packs, int stages, float grad_scale,
                                       bool write_grad, float* __restrict__ row_losses) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  RowPack* const buffers = reinterpret_cast<RowPack*>(shared_bytes);  // `stages` slices of slice_packs packs
  __shared__ uint64_t loaded[kMaxStages];  // one barrier a buffer, its phase completed by the copy's bytes
  // This block's partial of the last two scored rows: the other blocks of the cluster read it through distributed
  // shared memory after the row's cluster barrier, and a block writes the entry again only two scored rows later,
  // after the next row's barrier, which every reader reaches after its reads.
  __shared__ MaxSum block_totals[2];
  __shared__ float row_log_sum_exp;

  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t first_row = blockIdx.x / blocks, row_step = gridDim.x / blocks;
  const int64_t pack_count = vocab / kWidth;
  const int64_t begin = min(pack_count, int64_t(rank) * slice_packs);
  const int count = int(min(pack_count, begin + slice_packs) - begin);  // 0 for trailing ranks of tiny rows
  const uint32_t slice_bytes = uint32_t(count) * uint32_t(sizeof(RowPack));
  const auto slice_of = [&](int64_t row) { return reinterpret_cast<RowPack*>(logits + row * vocab) + begin; };

  // Thread 0 starts copying `row`'s slice into buffer `stage` when there is one to read: a row that exists, is
  // scored (an unscored row is only written) and has values in this block's slice. Every thread asks the same
  // question before waiting on the buffer, so the waits match the copies.
  const auto needs_load = [&](int64_t row) { return row < rows && count > 0 && !unscored(targets[row], vocab); };
  const auto start_load = [&](int64_t row, int stage) {
    if (threadIdx.x == 0 && needs_load(row)) {
      bulk::arrive_expect_bytes(&loaded[stage], slice_bytes);
      bulk::copy_to_shared(buffers + int64_t(stage) * slice_packs, slice_of(row), slice_bytes, &loaded[stage]);
    }
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bulk::barrier_init(&loaded[s], 1);
    bulk::fence_barrier_init();
  }
  __syncthreads();
  for (int s = 0; s + 1 < stages; ++s) start_load(first_row + s * row_step, s);

  uint32_t parities = 0;  // bit s: the parity of buffer s's next phase to wait for
  int exchanges = 0;      // scored rows so far: which block_totals entry this row uses
  int stage = 0;          // the buffer of this iteration's row
  for (int64_t row = first_row; row < rows; row += row_step) {
    // The buffer this iteration's row leaves behind (the previous iteration's) was released by the barrier that
    // ended that iteration: it takes the row stages - 1 ahead.
    const int ahead = stage == 0 ? stages - 1 : stage - 1;
    start_load(row + int64_t(stages - 1) * row_step, ahead);
    const int this_stage = stage;
    stage = stage + 1 == stages ? 0 : stage + 1;

    RowPack* const packs = slice_of(row);
    const int32_t target = targets[row];
    if (unscored(target, vocab)) {
      if (rank == 0 && threadIdx.x == 0) row_losses[row] = unscored_loss(target);
      if (write_grad)
        for (int p = threadIdx.x; p < count; p += kThreads) packs[p] = zero_pack<kWidth>();
      continue;  // uniform across the cluster: no block reaches the row's cluster barrier
    }
    const RowPack* const held = buffers + int64_t(this_stage) * slice_packs;
    if (count > 0) {
      bulk::wait(&loaded[this_stage], (parities >> this_stage) & 1u);
      parities ^= 1u << this_stage;
    }

    // The held kernel's statistics pass, from shared memory: thread t takes packs t, t + kThreads, ... in order.
    MaxSum partial{-INFINITY, 0.0f};
    int p = threadIdx.x;
    for (; p + 3 * kThreads < count; p += 4 * kThreads) {
      RowPack four[4];
      for (int u = 0; u < 4; ++u) four[u] = held[p + u * kThreads];
      for (int u = 0; u < 4; ++u) accumulate(partial, four[u]);
    }
    for (; p < count; p += kThreads) accumulate(partial, held[p]);
    const MaxSum total = block_merge<kThreads>(partial);
    const int entry = exchanges & 1;
    ++exchanges;
    if (threadIdx.x == 0) block_totals[entry] = total;
    cluster.sync();  // every block's partial of this row is published

    // Every block merges the same partials in the same order, so all hold the same logsumexp.
    if (threadIdx.x < 32) {
      const MaxSum theirs = int(threadIdx.x) < blocks ? *cluster.map_shared_rank(&block_totals[entry], int(threadIdx.x))
                                                      : MaxSum{-INFINITY, 0.0f};
      const MaxSum row_total = warp_merge(theirs);
      if (threadIdx.x == 0) row_log_sum_exp = row_total.max + logf(row_total.sum);
    }
    __syncthreads();
    const float log_sum_exp = row_log_sum_exp;
    // The block whose slice holds the target writes the loss, from its copy of the row.
    const int64_t target_pack = int64_t(target) / kWidth - begin;
    if (threadIdx.x == 0 && target_pack >= 0 && target_pack < count)
      row_losses[row] = log_sum_exp - __bfloat162float(held[target_pack].v[target % kWidth]);
    if (write_grad)
      for (p = threadIdx.x; p < count; p += kThreads)
        packs[p] = pack_gradient(held[p], (begin + p) * kWidth, target, log_sum_exp, grad_scale);
    __syncthreads();  // every thread is done with `held`: the next iteration's copy may overwrite it
  }
  cluster.sync();  // no block exits while another may still read its block_totals
}

// How many clusters of the kernel fit on the device at once, asked once per (device, kernel, shared bytes,
// cluster size): the occupancy query is a host call not worth repeating at every chunk.
int resident_clusters(const void* kernel, const cudaLaunchConfig_t& config, int device, int cluster_blocks) {
  static std::mutex mutex;
  static std::vector<std::tuple<int, const void*, size_t, int, int>> known;  // ..., clusters
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, k, bytes, blocks, clusters] : known)
    if (d == device && k == kernel && bytes == config.dynamicSmemBytes && blocks == cluster_blocks) return clusters;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the caller falls back to the held kernel
    clusters = 0;
  }
  known.emplace_back(device, kernel, config.dynamicSmemBytes, cluster_blocks, clusters);
  return clusters;
}

template <int kThreads>
cudaError_t launch_kernel(void* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                          bool write_grad, float* row_losses, cudaStream_t stream, int cluster_blocks, int stages) {
  const int64_t pack_count = vocab / kWidth;
  const int64_t slice_packs = (pack_count + cluster_blocks - 1) / cluster_blocks;
  const size_t bytes = size_t(stages) * size_t(slice_packs) * sizeof(RowPack);
  int device = 0, shared_limit = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess)
    status = cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (status != cudaSuccess) return status;
  constexpr int kStaticShared = 1024;  // the barriers, block_merge's partials and the cluster's exchange, with room
  const int dynamic_limit = shared_limit - kStaticShared;
  if (bytes > size_t(dynamic_limit)) return cudaErrorNotSupported;

  const auto kernel = cross_entropy_streamed_rows_kernel<kThreads>;
  static std::atomic<uint64_t> opted_in{0};
  status = allow_shared_memory_once(kernel, opted_in, device, dynamic_limit);
  if (status != cudaSuccess) return status;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(cluster_blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(cluster_blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  const int clusters = resident_clusters(reinterpret_cast<const void*>(kernel), config, device, cluster_blocks);
  if (clusters <= 0) return cudaErrorNotSupported;  // none fits: the held kernel's single buffer may
  config.gridDim = dim3(unsigned(std::min<int64_t>(rows, clusters) * cluster_blocks));
  return cudaLaunchKernelEx(&config, kernel, static_cast<__nv_bfloat16*>(logits), targets, rows, vocab,
                            int(slice_packs), stages, grad_scale, write_grad, row_losses);
}

}  // namespace

cudaError_t launch_cross_entropy_streamed_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                               float grad_scale, bool write_grad, float* row_losses,
                                               cudaStream_t stream, CrossEntropyLaunch how) {
  if (rows == 0) return cudaSuccess;
  if (how.stages < 2 || how.stages > kMaxStages) return cudaErrorInvalidValue;
  if (how.cluster_blocks != 2 && how.cluster_blocks != 4 && how.cluster_blocks != 8) return cudaErrorInvalidValue;
  if (vocab <= 0 || vocab % kWidth != 0 || reinterpret_cast<uintptr_t>(logits) % 16 != 0) return cudaErrorInvalidValue;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (how.threads == 256)
    return launch_kernel<256>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream,
                              how.cluster_blocks, how.stages);
  if (how.threads == 512)
    return launch_kernel<512>(logits, targets, rows, vocab, grad_scale, write_grad, row_losses, stream,
                              how.cluster_blocks, how.stages);
  return cudaErrorInvalidValue;
}

}  // namespace moetune::ops::cuda
