// The experts' weight gradients, K-grouped: dW_e (+)= dy[rows_e]ᵀ · x[rows_e] with dy [R, N], x [R, K],
// dW [E, N, K]. The group's row count is the reduction dimension. In CUTLASS's terms A = dyᵀ is an
// M-contiguous (ColumnMajor) [N, rows_e] operand and B = x an N-contiguous (RowMajor) [rows_e, K] one; both
// advance along their strided dimension from group to group, so any row count keeps TMA's 16-byte alignment,
// and a last K tile past rows_e is zero-filled by TMA rather than read from the next expert.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace grouped_gemm_detail;
// Two schedules, chosen by the experts' average row count (the reduction's length), both with cluster 2x1 and the
// epilogue that sums the squares it stores for the clipping norm (grouped_gemm_square_sum.cuh):
// - ping-pong 64x256 (each consumer warpgroup on its own tile, one's epilogue beside the other's main loop): at
//   Moonlight's ~768 rows an expert each tile runs ~12 k-blocks and its epilogue weighs; ping-pong hides it
//   (H200, session 16, .hq sweep: gate_up's dW 0.96 ms against 1.10 on cooperative 128x256, down's 0.55 against
//   0.60, sums included; session 30: 0.915 against 0.951 and 0.520 against 0.528);
// - cooperative 128x256 (both warpgroups on one tile) below kCooperativeBelowRows rows an expert: at DeepSeek-V3's
//   256 (256 experts, top-8, 8192 tokens) a tile runs 4 k-blocks, and the wider tile's halved operand traffic
//   per FLOP wins over the hidden epilogue: gate_up's dW [4096 x 7168] 10.43 against 11.74 ms, down's 5.28 against
//   5.94 (H200, session 30, GroupedGemmTiming); at Qwen3's 512 cooperative tied or led by up to 5% alone (gate_up
//   0.808-0.846 against 0.848-0.850 ms, down 0.418 against 0.438) but was not measured in a step, so 512 stays
//   ping-pong.
// (Wider epilogue sub-tiles on ping-pong were slower at every row count: 64x128 and 64x256 by 25-95%.)
template <bool kCooperative>
using ConfigWith =
    GroupedGemmConfig<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor,
                      cute::Shape<cute::Int<kCooperative ? 128 : 64>, cute::_256, cute::_64>,
                      cute::Shape<cute::_2, cute::_1, cute::_1>, SquareSummedLinearCombination, kCooperative>;
constexpr int64_t kCooperativeBelowRows = 384;

// The schedule the process starts with: ByRows, or for measuring a choice in a whole run (as MOETUNE_ADAMW_STAGES
// does AdamW's), MOETUNE_WEIGHT_GRAD_SCHEDULE = rows | ping-pong | cooperative; any other value fails every weight
// gradient's launch with a message naming it.
std::optional<WeightGradSchedule> initial_schedule() {
  const char* value = std::getenv("MOETUNE_WEIGHT_GRAD_SCHEDULE");
  if (value == nullptr || std::string_view(value) == "rows") return WeightGradSchedule::ByRows;
  if (std::string_view(value) == "ping-pong") return WeightGradSchedule::PingPong;
  if (std::string_view(value) == "cooperative") return WeightGradSchedule::Cooperative;
  return std::nullopt;
}

std::optional<WeightGradSchedule> g_schedule = initial_schedule();  // set_weight_grad_schedule

int ceil_div(int a, int b) { return (a + b - 1) / b; }
// A group's tile columns, and its slots under one schedule: (n / tile M) x (k / tile N) tiles rounded up, and the
// tile rows and columns up to whole clusters (CUTLASS's grouped scheduler visits those tiles too: measured,
// session 15), times the warps of each tile. Both schedules' tiles are 256 wide.
template <class Config>
struct Slots {
  static constexpr int kTileM = cute::size<0>(typename Config::Tile{}), kTileN = cute::size<1>(typename Config::Tile{});
  static constexpr int kClusterM = cute::size<0>(typename Config::Cluster{});
  static constexpr int kClusterN = cute::size<1>(typename Config::Cluster{});
  // The epilogue's warps on one tile: each writes a slot (ping-pong: one warpgroup, 4 warps; cooperative: 8).
  static constexpr int kWarpsPerTile = int(cute::size(typename Config::Mainloop::TiledMma{})) / 32;
  static int tiles_n(int k) { return ceil_div(ceil_div(k, kTileN), kClusterN) * kClusterN; }
  static int64_t per_group(int n, int k) {
    return int64_t(ceil_div(ceil_div(n, kTileM), kClusterM) * kClusterM) * tiles_n(k) * kWarpsPerTile;
  }
};
// The partials are sized for either schedule (the larger count; the other leaves its extra slots zero).
int64_t slots_per_group(int n, int k) {
  return std::max(Slots<ConfigWith<false>>::per_group(n, k), Slots<ConfigWith<true>>::per_group(n, k));
}

// An empty group is given M = 0 rather than K = 0: with K = 0 CUTLASS would still visit the group's tiles but
// run no MMA, and store accumulators that were never cleared. With M = 0 the group has no tiles at all, and
// its dW_e is zeroed (or left, when accumulating) by zero_empty_groups_kernel instead.
struct WeightGradGeometry {
  const Element* dy;
  const Element* x;
  Element* dw;
  int n, k;
  __device__ GroupOperands operator()(int e, int64_t begin, int count) const {
    const GroupShape shape = count > 0 ? cute::make_shape(n, k, count) : cute::make_shape(0, k, 0);
    return {shape, dy + begin * n, x + begin * k, dw + int64_t(e) * n * k};
  }
};

// dW_e = 0 for every expert without rows. One grid row per expert; the experts that have rows return at once.
__global__ void zero_empty_groups_kernel(const int32_t* __restrict__ offsets, uint4* __restrict__ dw,
                                         int64_t vectors_per_group) {
  gpu::wait_for_previous_kernel();
  const int e = blockIdx.y;
  if (offsets[e + 1] != offsets[e]) return;
  uint4* group = dw + int64_t(e) * vectors_per_group;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < vectors_per_group;
       i += int64_t(gridDim.x) * blockDim.x)
    group[i] = make_uint4(0, 0, 0, 0);
}

cudaError_t launch_zero_empty_groups(const int32_t* offsets, void* dw, int groups, int64_t group_elements,
                                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr int64_t kElementsPerVector = sizeof(uint4) / sizeof(Element);  // group_elements is a multiple of 8
  const int64_t vectors = group_elements / kElementsPerVector;
  const dim3 grid(unsigned(std::min<int64_t>((vectors + kThreads - 1) / kThreads, 64)), unsigned(groups));
  gpu::launch_dependent(zero_empty_groups_kernel, grid, kThreads, 0, stream, offsets, static_cast<uint4*>(dw), vectors);
  return cudaGetLastError();
}

}  // namespace

int64_t grouped_weight_grad_norm_slots(int groups, int n, int k) { return int64_t(groups) * slots_per_group(n, k); }

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::WeightGrad>(int groups, int sm_count) {
  return std::max(grouped_gemm_detail::scratch_bytes<ConfigWith<false>>(groups, sm_count),
                  grouped_gemm_detail::scratch_bytes<ConfigWith<true>>(groups, sm_count));
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::WeightGrad>(const GroupedGemmProblem& problem, void* scratch,
                                                             size_t scratch_bytes, int sm_count, cudaStream_t stream) {
  if (problem.norm_partials != nullptr) {
    // Empty groups have no tiles: their slots stay as zeroed here, as their dW_e is zeroed below.
    const int64_t slots = grouped_weight_grad_norm_slots(problem.groups, problem.n, problem.k);
    if (const cudaError_t status = gpu::zero_async(problem.norm_partials, size_t(slots) * sizeof(float), stream);
        status != cudaSuccess)
      return cuda_failure("zeroing the norm partials", status);
  }
  if (!problem.accumulate) {
    const int64_t group_elements = int64_t(problem.n) * problem.k;
    if (group_elements > 0) {
      if (const cudaError_t status = launch_zero_empty_groups(problem.offsets, problem.out, problem.groups,
                                                              group_elements, stream);
          status != cudaSuccess)
        return cuda_failure("launch of the empty-group zeroing kernel", status);
    }
  }
  const WeightGradGeometry geometry{static_cast<const Element*>(problem.a), static_cast<const Element*>(problem.b),
                                    static_cast<Element*>(problem.out), problem.n, problem.k};
  auto run = [&](auto cooperative) {
    using Config = ConfigWith<decltype(cooperative)::value>;
    const UniformStrides<Config> strides{row_stride<typename Config::StrideA>(problem.n),
                                         row_stride<typename Config::StrideB>(problem.k),
                                         row_stride<typename Config::StrideD>(problem.k)};
    const SquareSumPerWarp::Arguments sums{problem.norm_partials, Slots<Config>::tiles_n(problem.k),
                                           slots_per_group(problem.n, problem.k)};
    return run_grouped_gemm<Config>(geometry, strides, problem.offsets, problem.groups, problem.rows, problem.alpha,
                                    /*beta=*/problem.accumulate ? 1.0f : 0.0f, scratch, scratch_bytes, sm_count, stream,
                                    sums);
  };
  if (!g_schedule) {
    const char* value = std::getenv("MOETUNE_WEIGHT_GRAD_SCHEDULE");
    return std::string("MOETUNE_WEIGHT_GRAD_SCHEDULE='") + (value ? value : "") +
           "' is none of rows, ping-pong, cooperative";
  }
  const bool cooperative = *g_schedule == WeightGradSchedule::ByRows
                               ? problem.rows < kCooperativeBelowRows * problem.groups
                               : *g_schedule == WeightGradSchedule::Cooperative;
  return cooperative ? run(std::true_type{}) : run(std::false_type{});
}

void set_weight_grad_schedule(WeightGradSchedule schedule) { g_schedule = schedule; }

}  // namespace moetune::ops::cuda
