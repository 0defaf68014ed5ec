// `moetune finetune --nproc-per-node N`: one command starts the N ranks of a one-node job, on this same binary
// with the same arguments (less this flag). The CPU engine's ranks talk through MPI, so it runs `mpirun -np N`
// (which forwards signals and ends every rank when one fails). The GPU engine's ranks talk through NCCL: it
// starts them itself, one per GPU, with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) and NCCL_NVLS_ENABLE=0, forwards SIGINT/SIGTERM, and when one rank fails stops the others and
// exits with its status. Several nodes: start the binary with mpirun, srun or torchrun-style variables (README).
#pragma once

#include <string>
#include <vector>

namespace moetune::cli {

// Replaces this process with mpirun; returns only by throwing an Error naming what is wrong (N < 1, already a
// rank of a job, no mpirun on the PATH).
[[noreturn]] void launch_local_ranks(int nproc_per_node, const std::vector<std::string>& arguments, bool gpu_engine);

// argv without "--nproc-per-node N" / "--nproc-per-node=N".
std::vector<std::string> arguments_without_nproc(int argc, char** argv);

}  // namespace moetune::cli
