// This process's place in a job: how it was started (alone, by mpirun/srun, or by torchrun-style variables,
// which `moetune finetune --nproc-per-node N` sets for the ranks it starts), and the world communicator.
#pragma once

#include <memory>
#include <string>

#include "moetune/parallel/communicator.h"

namespace moetune::parallel {

enum class Launcher { Single, Mpi, EnvVars };

struct LaunchInfo {
  Launcher launcher = Launcher::Single;
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  // EnvVars: where rank 0 listens for the rendezvous
  int master_port = 0;
};

// From the environment: OMPI_COMM_WORLD_* (Open MPI's mpirun), PMI_RANK/PMI_SIZE (MPICH, srun with PMI2),
// PMIX_RANK (srun with PMIx), else RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (torchrun's names). A
// malformed or inconsistent value is an error naming the variable.
LaunchInfo detect_launch();

// The world of ranks for the CPU engine, whose ranks talk through MPI: a single process, or MPI_COMM_WORLD
// (MPI initialised on first use). Torchrun-style variables alone are an error that says to use mpirun.
std::unique_ptr<Communicator> cpu_world(const LaunchInfo& launch);

// The world for the GPU engine: one GPU per rank (device LOCAL_RANK) and NCCL between them, its id passed by MPI
// or the TCP rendezvous on MASTER_ADDR:MASTER_PORT. Alone: a single process.
std::unique_ptr<Communicator> gpu_world(const LaunchInfo& launch);

// When moetune was built with MPI (libopenmpi-dev found at configure time).
bool mpi_available();
std::unique_ptr<Communicator> mpi_world_communicator();
// Ends every rank of the MPI job (a failing rank must not leave the others waiting in a collective forever).
void mpi_abort(int code);
// Rank 0's bytes to every rank of MPI_COMM_WORLD.
std::string mpi_broadcast_bytes(const std::string& bytes);

// Records this process's rank for rank_prefix() (cpu_world does; the GPU world's maker calls it).
void note_world(const Communicator& world);

// The rank prefix for messages: "" alone, "rank 3: " in a job.
std::string rank_prefix();

}  // namespace moetune::parallel
