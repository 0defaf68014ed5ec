// The experts' weight-gradient epilogue that also sums the squares of what it stores, for the clipping norm
// (ops/cuda/grouped_gemm.h: grouped_matmul_weight_grad's norm partials). Without it the norm's pass reads every
// expert gradient back after the backward pass: 3.3 GB and ~0.85 ms a step on the Moonlight cut, where the
// epilogue already holds each value in registers.
//
// A CUTLASS SM90 epilogue-visitor node placed at the root of the tree, above the linear combination: it sees the
// bf16 values the store writes (the child's output, already rounded), adds their squares in fp32 per thread, and
// at the tile's end each warp adds its 32 sums with a fixed butterfly and its lane 0 writes one float to a slot
// of its own: slot (group, tile row, tile column, warp). No atomics: every slot has one writer and every sum a
// fixed order, so the partials' bits depend on the gradient alone, and ops/cuda/grad_norm.h adds them up in a
// fixed order too. Elements outside the group's bounds (a partial tile) are skipped by their coordinates.
// A null `partials` turns the node into a pass-through (the same kernel serves every weight gradient).
#pragma once

#include <cstdio>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>

namespace moetune::ops::cuda::grouped_gemm_detail {

struct SquareSumPerWarp {
  struct SharedStorage {};
  struct Arguments {
    float* partials = nullptr;  // null: no sums
    int tiles_n = 0;            // column tiles of a group's output
    int64_t slots_per_group = 0;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE SquareSumPerWarp() {}
  CUTLASS_HOST_DEVICE SquareSumPerWarp(Params const& params, SharedStorage const&) : params(params) {}
  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  // Coordinates: the thread's (CPY, CPY_M, CPY_N, EPI_M, EPI_N) view of the tile's output coordinates, and the
  // bound they must stay below (the group's extent seen from this tile); `interior`: the whole tile lies within
  // the group, so no element needs the test (every tile but a group's last row or column of tiles).
  template <class Coordinates, class Bound>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(float* slot, bool interior, Coordinates coordinates, Bound bound)
        : slot(slot), interior(interior), coordinates(coordinates), bound(bound) {}
    float* slot;  // null: pass through
    bool interior;
    Coordinates coordinates;
    Bound bound;
    float sum = 0.0f;

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementInput, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int epi_m, int epi_n,
        cutlass::Array<ElementInput, FragmentSize> const& stored) {
      if (slot == nullptr) return stored;
      if (interior) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < FragmentSize; ++i) {
          const float value = float(stored[i]);
          sum = fmaf(value, value, sum);
        }
        return stored;
      }
      auto here = coordinates(cute::_, cute::_, cute::_, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        if (cute::elem_less(here(epi_v * FragmentSize + i), bound)) {
          const float value = float(stored[i]);
          sum = fmaf(value, value, sum);
        }
      }
      return stored;
    }

    CUTLASS_DEVICE void end() {
      if (slot == nullptr) return;
      float total = sum;
      CUTLASS_PRAGMA_UNROLL
      for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
      if ((threadIdx.x & 31) == 0) *slot = total;
    }
  };

  // A group's slots are laid out by tile row and column, tiles_n columns a row; the scheduler may visit whole
  // tiles past the group's rows (a 2x1 cluster pads each group to an even number of tile rows), which write
  // their zero sums to slots of their own (slots_per_group counts them). A slot past the group's would belong
  // to the next group: the kernel stops the context instead, loudly.
  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    constexpr int kWarps = int(cute::size(decltype(args.tiled_mma){})) / 32;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    float* slot = nullptr;
    bool interior = false;
    if (params.partials != nullptr) {
      const int64_t within = (int64_t(m) * params.tiles_n + int64_t(n)) * kWarps + args.thread_idx / 32;
      if (within >= params.slots_per_group) {
        printf("moetune grouped GEMM: norm partial slot %lld of tile (%d, %d) past the group's %lld\n",
               static_cast<long long>(within), int(m), int(n), static_cast<long long>(params.slots_per_group));
        __trap();
      }
      slot = params.partials + int64_t(l) * params.slots_per_group + within;
      const int tile_m = int(cute::size<0>(args.tile_shape_mnk)), tile_n = int(cute::size<1>(args.tile_shape_mnk));
      interior = (int(m) + 1) * tile_m <= int(cute::get<0>(args.problem_shape_mnkl)) &&
                 (int(n) + 1) * tile_n <= int(cute::get<1>(args.problem_shape_mnkl));
    }
    return ConsumerStoreCallbacks<decltype(args.tCcD), decltype(args.residue_tCcD)>(slot, interior, args.tCcD,
                                                                                    args.residue_tCcD);
  }
};

// The weight gradient's whole tree: D = alpha · acc + beta · C as CUTLASS's ptr-array linear combination
// computes it (rounded to bf16 there), under the node above.
using SquareSummedLinearCombination = cutlass::epilogue::fusion::Sm90EVT<
    SquareSumPerWarp,
    cutlass::epilogue::fusion::Sm90LinearCombinationPtrArray<cutlass::bfloat16_t, float, cutlass::bfloat16_t, float>>;

}  // namespace moetune::ops::cuda::grouped_gemm_detail
