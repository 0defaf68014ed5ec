// `moetune finetune --nproc-per-node N`: one command starts the N ranks of a one-node job. The ranks talk
// through MPI, so this runs `mpirun -np N` on this same binary with the same arguments (less this flag);
// mpirun forwards signals to every rank and ends them all when one fails. Several nodes: start the binary
// with mpirun or srun directly (README).
#pragma once

#include <string>
#include <vector>

namespace moetune::cli {

// Replaces this process with mpirun; returns only by throwing an Error naming what is wrong (N < 1, already a
// rank of a job, no mpirun on the PATH).
[[noreturn]] void launch_local_ranks(int nproc_per_node, const std::vector<std::string>& arguments);

// argv without "--nproc-per-node N" / "--nproc-per-node=N".
std::vector<std::string> arguments_without_nproc(int argc, char** argv);

}  // namespace moetune::cli
