// The machinery the three grouped-GEMM kernels share (included only by grouped_gemm_{forward,input_grad,
// weight_grad}.cu, each instantiating one operand arrangement): the CUTLASS SM90 grouped kernel type, a device
// kernel that turns the expert offsets into CUTLASS's per-group problem shapes, pointers and strides, and the
// host launcher that lays out the scratch and queues both.
//
// Why CUTLASS's ptr-array grouped kernel with device-side problem shapes: the group sizes (tokens per expert)
// are only known on the device after routing, and reading them back would stall the stream every layer. The
// host passes nullptr as the host problem shapes, so CUTLASS sizes its persistent grid from the SM count alone
// and its tile scheduler walks the groups' shapes on the device (as torch._grouped_mm does).
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cstdio>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <string>
#include <type_traits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"
#include "moetune/ops/cuda/grouped_gemm_square_sum.cuh"

namespace moetune::ops::cuda::grouped_gemm_detail {

using Element = cutlass::bfloat16_t;
using Accumulator = float;
using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
using GroupShape = ProblemShape::UnderlyingProblemShape;

// D [M, N] row-major = A [M, K] · B [K, N]; LayoutA / LayoutB say which of A's and B's dimensions is contiguous
// (CUTLASS's convention: B ColumnMajor means K-contiguous, i.e. a [N, K] row-major weight).
//
// Each .cu file picks its tile, cluster and schedule. The M-grouped products (forward, input gradient): ping-pong
// (each consumer warpgroup on its own tile, one's epilogue beside the other's main loop), 64x256x64, cluster 2x1
// (the two CTAs of a cluster multicast the shared operand tile); on Qwen3's experts this beat the cooperative
// 128x256x64 tile (torch._grouped_mm's choice) by up to 15% per product (equal for the gate/up forward) and
// 0.05-0.28 ms per MoE layer (docs/benchmarks.md, issue 11): the 64-row tiles pad an expert's last tile half as
// much. The weight gradient: the same ping-pong 64x256x64, or cooperative 128x256x64 at few rows an expert
// (grouped_gemm_weight_grad.cu says when and why). Groups whose
// M is not a multiple of the tile (or of the cluster) get partial tiles: TMA zero-fills the loads past the group's
// bounds and clips the stores, so nothing outside the group is read or written.
// (TileShape and ClusterShape are template parameters only so that every type below depends on one: nvcc's
// front end rewrites non-dependent CUTLASS builder types inside a class template into code g++ rejects.)
// FusionOp: the epilogue's tree; the weight gradient's adds its squares' sums (grouped_gemm_square_sum.cuh).
template <class LayoutA, class LayoutB, class TileShape, class ClusterShape,
          class FusionOp = cutlass::epilogue::fusion::LinearCombination<Element, Accumulator>, bool kCooperative = false>
struct GroupedGemmConfig {
  using EpilogueSchedule = std::conditional_t<kCooperative, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
  using KernelSchedule = std::conditional_t<kCooperative, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>;
  using Tile = TileShape;
  using Cluster = ClusterShape;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignment = 16 / int(sizeof(Element));  // TMA needs 16-byte aligned rows

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, Accumulator,
      Element, LayoutD*, kAlignment,  // C: read only when beta != 0 (accumulating into D)
      Element, LayoutD*, kAlignment,  // D
      EpilogueSchedule, FusionOp>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, LayoutA*, kAlignment,
      Element, LayoutB*, kAlignment,
      Accumulator, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;
  static_assert(std::is_same_v<StrideC, StrideD>, "C aliases D, so they must share one stride type");
};

// What CUTLASS reads per group, all in device memory (one scratch block).
template <class Config>
struct GroupArrays {
  GroupShape* shapes;
  const Element** a;
  const Element** b;
  Element** d;
  typename Config::StrideA* stride_a;
  typename Config::StrideB* stride_b;
  typename Config::StrideD* stride_d;
};

// The stride of a packed row-major matrix in CUTLASS's (outer, inner, group) form: of the first two modes one
// is the static 1 (the contiguous one) and the other the row length. The group mode is static 0: each group has
// its own base pointer instead.
template <class Stride>
Stride row_stride(int64_t row_length) {
  Stride stride{};
  if constexpr (cute::is_static_v<std::decay_t<decltype(cute::get<0>(stride))>>)
    cute::get<1>(stride) = row_length;
  else
    cute::get<0>(stride) = row_length;
  return stride;
}

// The same strides for every group (only the base pointers and row counts differ).
template <class Config>
struct UniformStrides {
  typename Config::StrideA a;
  typename Config::StrideB b;
  typename Config::StrideD d;
};

// Byte offsets of the arrays and of CUTLASS's workspace within the scratch block. The pointer arrays come
// first and 16-byte aligned: CUTLASS builds placeholder TMA descriptors from their addresses.
struct ScratchLayout {
  size_t shapes, a, b, d, stride_a, stride_b, stride_d, workspace, total;
};

inline size_t align_up(size_t bytes, size_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

template <class Config>
ScratchLayout scratch_layout(int groups, size_t workspace_bytes) {
  ScratchLayout layout{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t start = at;
    at = align_up(at + bytes, 128);
    return start;
  };
  const size_t n = size_t(groups);
  layout.a = take(n * sizeof(Element*));
  layout.b = take(n * sizeof(Element*));
  layout.d = take(n * sizeof(Element*));
  layout.shapes = take(n * sizeof(GroupShape));
  layout.stride_a = take(n * sizeof(typename Config::StrideA));
  layout.stride_b = take(n * sizeof(typename Config::StrideB));
  layout.stride_d = take(n * sizeof(typename Config::StrideD));
  layout.workspace = take(workspace_bytes);
  layout.total = at;
  return layout;
}

// One group's (M, N, K) and base pointers, as a Geometry functor returns them.
struct GroupOperands {
  GroupShape shape;
  const Element* a;
  const Element* b;
  Element* d;
};

// Writes every group's shape, pointers and strides from the offsets. `Geometry` says, for group e with rows
// [begin, begin + count), what (M, N, K) and which A, B and D base pointers that is. Offsets that break the
// contract (not starting at 0, decreasing, past the last row) would make the GEMM read and write out of
// bounds: the kernel stops the context instead, loudly, at the next synchronisation.
template <class Config, class Geometry>
__global__ void build_group_arrays_kernel(Geometry geometry, const int32_t* __restrict__ offsets, int groups,
                                          int64_t rows, GroupArrays<Config> arrays, UniformStrides<Config> strides) {
  gpu::wait_for_previous_kernel();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < groups; e += gridDim.x * blockDim.x) {
    const int64_t begin = offsets[e], end = offsets[e + 1];
    if ((e == 0 && begin != 0) || end < begin || end > rows) {
      printf("moetune grouped GEMM: bad expert offsets: group %d owns rows [%lld, %lld) of %lld\n", e,
             static_cast<long long>(begin), static_cast<long long>(end), static_cast<long long>(rows));
      __trap();
    }
    const auto group = geometry(e, begin, int(end - begin));
    arrays.shapes[e] = group.shape;
    arrays.a[e] = group.a;
    arrays.b[e] = group.b;
    arrays.d[e] = group.d;
    arrays.stride_a[e] = strides.a;
    arrays.stride_b[e] = strides.b;
    arrays.stride_d[e] = strides.d;
  }
}

// One alpha and one beta for every group, in CUTLASS's linear-combination arguments (its friendly form).
template <class Thread>
void set_scalars(Thread& thread, float alpha, float beta) {
  thread.alpha = alpha;
  thread.beta = beta;
  thread.alpha_ptr = nullptr;
  thread.beta_ptr = nullptr;
  thread.alpha_ptr_array = nullptr;
  thread.beta_ptr_array = nullptr;
  thread.dAlpha = {cute::_0{}, cute::_0{}, 0};
  thread.dBeta = {cute::_0{}, cute::_0{}, 0};
}

// The same in the square-summed tree's arguments: the linear combination's (beta's broadcast, C, alpha's
// broadcast times the accumulator, the multiply-add) under the node's own.
inline void set_scalars(SquareSummedLinearCombination::Arguments& thread, float alpha, float beta) {
  using Zero = cute::Stride<cute::_0, cute::_0, int64_t>;
  thread.op_0 = {{{beta}, {nullptr}, {nullptr}, {Zero{}}}, {}, {{{alpha}, {nullptr}, {nullptr}, {Zero{}}}, {}, {}}, {}};
}

template <class Config>
typename Config::Gemm::Arguments make_arguments(int groups, const GroupArrays<Config>& arrays, float alpha, float beta,
                                                int sm_count, SquareSumPerWarp::Arguments sums = {},
                                                bool raster_along_n = false) {
  typename Config::Gemm::Arguments arguments{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {groups, arrays.shapes, /*host problem shapes:*/ nullptr},
      {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b},
      // C aliases D: only read when beta != 0 (CUTLASS skips the C load for a zero scalar beta).
      {{}, const_cast<const Element**>(arrays.d), arrays.stride_d, arrays.d, arrays.stride_d}};
  set_scalars(arguments.epilogue.thread, alpha, beta);
  if constexpr (std::is_same_v<std::decay_t<decltype(arguments.epilogue.thread)>,
                               SquareSummedLinearCombination::Arguments>)
    arguments.epilogue.thread.op_1 = sums;
  int device = 0;
  cudaGetDevice(&device);
  arguments.hw_info.device_id = device;
  arguments.hw_info.sm_count = sm_count;
  using Raster = std::decay_t<decltype(arguments.scheduler.raster_order)>;
  arguments.scheduler.raster_order = raster_along_n ? Raster::AlongN : Raster::AlongM;
  return arguments;
}

template <class Config>
size_t scratch_bytes(int groups, int sm_count) {
  const GroupArrays<Config> no_arrays{};
  const size_t workspace = Config::Gemm::get_workspace_size(make_arguments<Config>(groups, no_arrays, 1.0f, 0.0f, sm_count));
  return scratch_layout<Config>(groups, workspace).total;
}

inline std::string cuda_failure(const char* step, cudaError_t status) {
  return std::string(step) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

inline std::string cutlass_failure(const char* step, cutlass::Status status) {
  std::string message = std::string("CUTLASS ") + step + ": " + cutlassGetStatusString(status);
  // A failed launch leaves its reason in CUDA's error state; report it too (and clear it).
  if (const cudaError_t cuda = cudaGetLastError(); cuda != cudaSuccess) message += " / " + cuda_failure("CUDA", cuda);
  return message;
}

// Queues the group-array kernel, then the CUTLASS grouped GEMM, on `stream`.
template <class Config, class Geometry>
std::string run_grouped_gemm(const Geometry& geometry, const UniformStrides<Config>& strides, const int32_t* offsets,
                             int groups, int64_t rows, float alpha, float beta, void* scratch, size_t scratch_size,
                             int sm_count, cudaStream_t stream, SquareSumPerWarp::Arguments sums = {},
                             bool raster_along_n = false) {
  const size_t workspace_bytes = Config::Gemm::get_workspace_size(
      make_arguments<Config>(groups, GroupArrays<Config>{}, alpha, beta, sm_count, sums, raster_along_n));
  const ScratchLayout layout = scratch_layout<Config>(groups, workspace_bytes);
  if (scratch == nullptr || scratch_size < layout.total || reinterpret_cast<uintptr_t>(scratch) % 128 != 0)
    return "grouped GEMM scratch is missing, too small (" + std::to_string(scratch_size) + " < " +
           std::to_string(layout.total) + " bytes) or not 128-byte aligned";

  char* base = static_cast<char*>(scratch);
  const GroupArrays<Config> arrays{
      reinterpret_cast<GroupShape*>(base + layout.shapes),
      reinterpret_cast<const Element**>(base + layout.a),
      reinterpret_cast<const Element**>(base + layout.b),
      reinterpret_cast<Element**>(base + layout.d),
      reinterpret_cast<typename Config::StrideA*>(base + layout.stride_a),
      reinterpret_cast<typename Config::StrideB*>(base + layout.stride_b),
      reinterpret_cast<typename Config::StrideD*>(base + layout.stride_d)};

  constexpr int kThreads = 128;
  const int blocks = (groups + kThreads - 1) / kThreads;
  gpu::launch_dependent(build_group_arrays_kernel<Config, Geometry>, blocks, kThreads, 0, stream, geometry, offsets,
                        groups, rows, arrays, strides);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess)
    return cuda_failure("launch of the group-array kernel", status);

  const auto arguments = make_arguments<Config>(groups, arrays, alpha, beta, sm_count, sums, raster_along_n);
  typename Config::Gemm gemm;
  if (const cutlass::Status status = gemm.can_implement(arguments); status != cutlass::Status::kSuccess)
    return cutlass_failure("can_implement", status);
  if (const cutlass::Status status = gemm.initialize(arguments, base + layout.workspace, stream);
      status != cutlass::Status::kSuccess)
    return cutlass_failure("initialize", status);
  if (const cutlass::Status status = gemm.run(stream); status != cutlass::Status::kSuccess)
    return cutlass_failure("run", status);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess)
    return cuda_failure("launch of the grouped GEMM", status);
  return {};
}

// M-grouped (forward and input gradient): group e multiplies x[rows_e] ([count, k], A) by expert e's weight
// (B) into out[rows_e] ([count, n], D), times alpha, plus out[rows_e] itself when accumulating (C aliases D).
// An empty group has M = 0, hence no tiles: CUTLASS never visits it.
struct RowsTimesWeightGeometry {
  const Element* x;
  const Element* weights;  // [groups, n, k] or [groups, k, n]: n·k elements per expert either way
  Element* out;
  int n, k;
  __device__ GroupOperands operator()(int e, int64_t begin, int count) const {
    return {cute::make_shape(count, n, k), x + begin * k, weights + int64_t(e) * n * k, out + begin * n};
  }
};

// Both M-grouped kernels: x and out row-major; only the weight's arrangement (LayoutB) differs.
// `weight_row` is the length of one stored row of W_e: k for [n, k], n for [k, n].
template <class Config>
std::string run_rows_times_weight(const GroupedGemmProblem& problem, int64_t weight_row, void* scratch,
                                  size_t scratch_bytes, int sm_count, cudaStream_t stream) {
  const RowsTimesWeightGeometry geometry{static_cast<const Element*>(problem.a), static_cast<const Element*>(problem.b),
                                         static_cast<Element*>(problem.out), problem.n, problem.k};
  const UniformStrides<Config> strides{row_stride<typename Config::StrideA>(problem.k),
                                       row_stride<typename Config::StrideB>(weight_row),
                                       row_stride<typename Config::StrideD>(problem.n)};
  return run_grouped_gemm<Config>(geometry, strides, problem.offsets, problem.groups, problem.rows, problem.alpha,
                                  /*beta=*/problem.accumulate ? 1.0f : 0.0f, scratch, scratch_bytes, sm_count, stream,
                                  /*sums=*/{}, /*raster_along_n=*/true);
}

}  // namespace moetune::ops::cuda::grouped_gemm_detail
