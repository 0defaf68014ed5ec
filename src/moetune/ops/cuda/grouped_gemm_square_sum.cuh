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
// fixed order too.
// A null `partials` turns the node into a pass-through (the same kernel serves every weight gradient).
#pragma once

#include <cutlass/cutlass.h>

#include <cute/tensor.hpp>
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

  // Only the slot and the running sum: every element of the tile is summed, also those outside the group's
  // bounds, which are exactly zero (TMA zero-fills the operands' loads past the bounds, so their accumulators
  // are 0, and with no C read alpha · 0 is stored). An earlier version skipped them by their coordinates; adding
  // the zeros needs no coordinates and no test per element.
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE explicit ConsumerStoreCallbacks(float* slot) : slot(slot) {}
    float* slot;  // null: pass through
    float sum = 0.0f;

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementInput, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int, int, int,
        cutlass::Array<ElementInput, FragmentSize> const& stored) {
      if (slot == nullptr) return stored;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        const float value = float(stored[i]);
        sum = fmaf(value, value, sum);
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
  // to the next group: the kernel stops the context instead (an illegal-instruction error at the next
  // synchronisation).
  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    constexpr int kWarps = int(cute::size(decltype(args.tiled_mma){})) / 32;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    float* slot = nullptr;
    if (params.partials != nullptr) {
      const int64_t within = (int64_t(m) * params.tiles_n + int64_t(n)) * kWarps + args.thread_idx / 32;
      // No printf here: inline (session 15) or out of line, its call made the kernel keep a stack frame and
      // spill, and cost every tile 25-50% (gate_up's dW 1.46 against 0.96 ms on Moonlight's shapes, H200,
      // session 16); a bare trap costs 1-2%. The GPU tests cover the cluster-padded rows this guards (odd
      // tile-row counts).
      if (within >= params.slots_per_group) __trap();
      slot = params.partials + int64_t(l) * params.slots_per_group + within;
    }
    return ConsumerStoreCallbacks(slot);
  }
};

// The weight gradient's whole tree: D = alpha · acc + beta · C as CUTLASS's ptr-array linear combination
// computes it (rounded to bf16 there), under the node above.
using SquareSummedLinearCombination = cutlass::epilogue::fusion::Sm90EVT<
    SquareSumPerWarp,
    cutlass::epilogue::fusion::Sm90LinearCombinationPtrArray<cutlass::bfloat16_t, float, cutlass::bfloat16_t, float>>;

}  // namespace moetune::ops::cuda::grouped_gemm_detail
