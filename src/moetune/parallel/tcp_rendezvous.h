// The rendezvous of ranks started without MPI (torchrun-style variables, or `--nproc-per-node` on the GPU
// engine): rank 0 listens on MASTER_ADDR:MASTER_PORT and hands every other rank the same bytes (the NCCL unique
// id). A port in use, or a rank 0 that never answers within the timeout, is an error naming the address.
#pragma once

#include <string>

namespace moetune::parallel {

// Rank 0 passes `blob` and gets it back; the others get rank 0's. Every rank waits until all have connected.
std::string rendezvous_broadcast(const std::string& master_addr, int master_port, int rank, int world_size,
                                 const std::string& blob, int timeout_seconds = 300);

}  // namespace moetune::parallel
