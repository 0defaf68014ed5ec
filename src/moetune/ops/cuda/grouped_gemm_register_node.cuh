// What every register-only node of the grouped GEMMs' epilogue trees declares for CUTLASS's SM90 visitor tree
// (grouped_gemm_square_sum.cuh, grouped_gemm_swiglu_backward.cuh): no shared memory, no workspace, no producer
// loads (a node reads global memory from the consumer warps, if at all); its arguments are its parameters.
// A node derives from RegisterOnlyNode<ItsArguments>, inherits the constructors and adds its consumer callbacks
// (and its own can_implement where it has something to check).
#pragma once

#include <cutlass/cutlass.h>

#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>

namespace moetune::ops::cuda::grouped_gemm_detail {

template <class NodeArguments>
struct RegisterOnlyNode {
  struct SharedStorage {};
  using Arguments = NodeArguments;
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

  CUTLASS_HOST_DEVICE RegisterOnlyNode() {}
  CUTLASS_HOST_DEVICE RegisterOnlyNode(Params const& params, SharedStorage const&) : params(params) {}
  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }
};

}  // namespace moetune::ops::cuda::grouped_gemm_detail
