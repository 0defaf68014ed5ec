// SwiGLU's backward pass in the epilogue of the experts' down-projection input gradient
// (ops/cuda/grouped_gemm.h: grouped_matmul_swiglu_backward). Unfused, that product stores d(activated) [R, I]
// and swiglu_backward reads it back beside gate_up [R, 2I] to write d(gate_up) [R, 2I] (and, without the kept
// activation, the activation recomputed): d(activated) crosses DRAM twice, 4 bytes a value, ~0.28 GB a layer on
// Moonlight's cut, and the backward is a launch of its own (0.26 ms a layer, docs/benchmarks.md session 7).
// Here the product's accumulators never leave the registers: each thread reads the gate and up values of the
// elements it holds, and the tile's store (TMA) writes d(gate), the first half of d(gate_up)'s row.
//
// A CUTLASS SM90 epilogue-visitor node over the accumulator (Sm90AccFetch), at the tree's root:
// - begin_loop (each epilogue sub-tile): loads the thread's gate and up values from global memory in the
//   accumulator fragments' arrangement (cute's epilogue partition, as CUTLASS's register-staged aux loads do),
//   predicated on the group's rows and the N bound; the next sub-tile's values are requested one sub-tile ahead
//   (two register buffers) so the loads' latency is spent behind this sub-tile's arithmetic and stores;
// - visit: rounds the accumulator to bf16 first (what grouped_matmul would store, so the result is bit for bit
//   grouped_matmul followed by swiglu_backward), applies gated::Silu's backward (the one definition the
//   pointwise kernels use), returns d(gate) for the TMA store and keeps d(up) (and the activation) in registers;
// - end_loop: stores d(up) (and the activation) with predicated register-to-global copies.
// CUTLASS's grouped problem shapes give a tile only its group's (M, N, K) and index l; the group's first row
// comes from the expert offsets, read once per tile.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>

#include "moetune/ops/cuda/gated_activation.cuh"
#include "moetune/ops/cuda/grouped_gemm_register_node.cuh"

namespace moetune::ops::cuda::grouped_gemm_detail {

struct SwigluBackwardArguments {
  const cutlass::bfloat16_t* gate_up = nullptr;  // [R, 2I]: the forward's pre-activation, gate | up
  cutlass::bfloat16_t* dgate_up = nullptr;       // [R, 2I]: d(gate) is the product's D; d(up) is written here
  cutlass::bfloat16_t* activated = nullptr;      // [R, I] or null: the activation recomputed
  const int32_t* offsets = nullptr;              // [groups + 1]: group l's first row is offsets[l]
  int inner = 0;                                 // I
};

struct SwigluBackwardRows : RegisterOnlyNode<SwigluBackwardArguments> {
  using RegisterOnlyNode::RegisterOnlyNode;
  using Element = cutlass::bfloat16_t;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.gate_up != nullptr && args.dgate_up != nullptr && args.offsets != nullptr && args.inner % 8 == 0;
  }

  // GIn / GOut: a [group rows, I] global view partitioned as the accumulators, (CPY, CPY_M, CPY_N, EPI_M, EPI_N),
  // read / written; CTensor: its coordinates, for the bounds; RTensor: one sub-tile's registers (CPY, CPY_M, CPY_N).
  template <class GIn, class GOut, class CTensor, class RTensor, class Bounds>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(GIn gate, GIn up, GOut dup, GOut act, CTensor coords, Bounds bounds,
                                          bool has_activation)
        : gate(gate), up(up), dup(dup), act(act), coords(coords), bounds(bounds), has_activation(has_activation) {}

    GIn gate, up;
    GOut dup, act;
    CTensor coords;
    Bounds bounds;  // (group rows, I, 1)
    bool has_activation;
    RTensor gate_regs[2], up_regs[2];  // sub-tile s in buffer s % 2
    RTensor dup_regs, act_regs;

    static constexpr int kSubtilesM = decltype(cute::size<3>(std::declval<GIn&>()))::value;
    static constexpr int kSubtiles = kSubtilesM * decltype(cute::size<4>(std::declval<GIn&>()))::value;

    // Register <-> global copies of one sub-tile, in vectors of the elements that are adjacent in both (a thread's
    // accumulator pairs: 4 bytes), each vector kept or skipped whole by its first element's coordinate (I is a
    // multiple of 8, so a vector never straddles the N bound).
    template <bool kToRegisters, class Global, class Registers>
    CUTLASS_DEVICE void copy_subtile(Global&& global, Registers&& registers, int epi_m, int epi_n) {
      using namespace cute;
      constexpr auto common = decltype(max_common_layout(global(_, _, _, _0{}, _0{}), registers)){};
      constexpr int kVector = cute::min(8, int(size(common)));
      using Vector = cutlass::Array<Element, kVector>;
      Tensor global_vectors = recast<Vector>(coalesce(global(_, _, _, epi_m, epi_n)));
      Tensor register_vectors = recast<Vector>(coalesce(registers));
      Tensor vector_coords =
          tensor<1>(zipped_divide(coalesce(coords(_, _, _, epi_m, epi_n)), common.compose(Int<kVector>{})));
      Tensor inside = lazy::transform(vector_coords, [&](auto const& c) { return elem_less(c, bounds); });
      if constexpr (kToRegisters)
        copy_if(inside, global_vectors, register_vectors);
      else
        copy_if(inside, register_vectors, global_vectors);
    }

    // The collective walks the sub-tiles N outer, M inner (sm90_epilogue_array_tma_warpspecialized.hpp); every
    // sub-tile index here is a constant once its loops are unrolled, so the two buffers stay in registers.
    CUTLASS_DEVICE void load_subtile(int subtile) {
      const int epi_m = subtile % kSubtilesM, epi_n = subtile / kSubtilesM;
      copy_subtile<true>(gate, gate_regs[subtile % 2], epi_m, epi_n);
      copy_subtile<true>(up, up_regs[subtile % 2], epi_m, epi_n);
    }

    CUTLASS_DEVICE void begin() { load_subtile(0); }

    CUTLASS_DEVICE void begin_loop(int epi_m, int epi_n) {
      const int next = epi_n * kSubtilesM + epi_m + 1;
      if (next < kSubtiles) load_subtile(next);
    }

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<Element, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const&,
                                                               int epi_v, int epi_m, int epi_n,
                                                               cutlass::Array<ElementInput, FragmentSize> const& acc) {
      using Fragment = cutlass::Array<Element, FragmentSize>;
      const int buffer = (epi_n * kSubtilesM + epi_m) % 2;
      const Fragment& g = cute::recast<Fragment>(gate_regs[buffer])(epi_v);
      const Fragment& u = cute::recast<Fragment>(up_regs[buffer])(epi_v);
      Fragment& du = cute::recast<Fragment>(dup_regs)(epi_v);
      Fragment& a = cute::recast<Fragment>(act_regs)(epi_v);
      Fragment dg;
      const gated::Silu silu;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        const float d = float(Element(float(acc[i])));  // d(activated) as the unfused product stores it
        const float gf = float(g[i]), uf = float(u[i]);
        float dgf, duf;
        silu.backward(gf, uf, d, dgf, duf);
        dg[i] = Element(dgf);
        du[i] = Element(duf);
        a[i] = Element(silu.forward(gf, uf));
      }
      return dg;
    }

    CUTLASS_DEVICE void end_loop(int epi_m, int epi_n) {
      copy_subtile<false>(dup, dup_regs, epi_m, epi_n);
      if (has_activation) copy_subtile<false>(act, act_regs, epi_m, epi_n);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    const int64_t first_row = params.offsets[l];
    const int64_t row = 2 * int64_t(params.inner);
    // Views of the group's rows only: the index l is spent on finding them, so the tile's coordinate in the
    // (unit) group mode is 0.
    const auto bounds = make_shape(int(M), int(N), _1{});
    auto view = [&](auto* base, int64_t row_length) {
      return make_tensor(make_gmem_ptr(base + first_row * row_length),
                         make_layout(bounds, make_stride(row_length, _1{}, _0{})));
    };
    const auto tile = make_coord(m, n, k, _0{});
    auto partition = [&](auto const& tensor) {
      return cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
          tensor, args.tile_shape_mnk, tile, args.epi_tile, args.tiled_copy, args.thread_idx);
    };
    const bool has_activation = params.activated != nullptr;
    auto gate = partition(view(params.gate_up, row));
    auto up = partition(view(params.gate_up + params.inner, row));
    auto dup = partition(view(params.dgate_up + params.inner, row));
    auto act = partition(has_activation ? view(params.activated, int64_t(params.inner)) : view(params.dgate_up, row));
    auto coords = partition(make_identity_tensor(bounds));
    using RTensor = decltype(make_tensor<Element>(take<0, 3>(cute::shape(gate))));
    return ConsumerStoreCallbacks<decltype(gate), decltype(dup), decltype(coords), RTensor, decltype(bounds)>(
        gate, up, dup, act, coords, bounds, has_activation);
  }
};

// The whole tree: the node above over the accumulator.
using SwigluBackwardEpilogue =
    cutlass::epilogue::fusion::Sm90EVT<SwigluBackwardRows, cutlass::epilogue::fusion::Sm90AccFetch>;

}  // namespace moetune::ops::cuda::grouped_gemm_detail
