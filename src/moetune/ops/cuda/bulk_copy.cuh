// Hopper's bulk asynchronous copies from global into shared memory (cp.async.bulk, the TMA unit's 1-D form: no
// tensor map, 16-byte aligned addresses and sizes) and the shared-memory barriers (mbarrier) that count their
// bytes, as inline PTX for sm_90. A copy is one instruction for any number of bytes, so the bytes a block keeps in
// flight no longer cost registers. Included by .cu files only.
#pragma once

#include <cstdint>

namespace moetune::ops::cuda::bulk {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return uint32_t(__cvta_generic_to_shared(pointer));
}

// A barrier whose phase completes after `arrivals` arrivals and every byte announced by arrive_expect_bytes.
__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}

// Makes the barriers' initialisation visible to the copy unit (then a __syncthreads makes it visible to the block).
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ __forceinline__ void arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// One arrival that also announces `bytes` still to come from copies completing on this barrier.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// Blocks until the barrier's phase of parity `parity` (0 for its first phase, then alternating) has completed.
__device__ __forceinline__ void wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  } while (!done);
}

// An L2 policy for data read once: evict it first.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory; the bytes count
// towards `barrier`'s current phase. With a policy (evict_first_policy), L2 keeps the source lines as it says.
__device__ __forceinline__ void copy_to_shared(void* destination, const void* source, uint32_t bytes,
                                               uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(destination)),
               "l"(source), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}
__device__ __forceinline__ void copy_to_shared(void* destination, const void* source, uint32_t bytes,
                                               uint64_t* barrier, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          shared_address(destination)),
      "l"(source), "r"(bytes), "r"(shared_address(barrier)), "l"(policy)
      : "memory");
}

}  // namespace moetune::ops::cuda::bulk
