#include "moetune/parallel/world.h"

#include <cstdlib>
#include <optional>

#include "moetune/core/device.h"
#include "moetune/core/error.h"

namespace moetune::parallel {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

int env_int(const char* name, int low, int high) {
  const std::string text = env(name).value();
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < low || value > high)
    fail("environment variable {}='{}' is not an integer in [{}, {}]", name, text, low, high);
  return int(value);
}

int g_rank = 0, g_world = 1;

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
  constexpr int kMaxRanks = 1 << 20;
  const auto from = [&](Launcher launcher, const char* rank, const char* size, const char* local) {
    info.launcher = launcher;
    info.world_size = env_int(size, 1, kMaxRanks);
    info.rank = env_int(rank, 0, info.world_size - 1);
    info.local_rank = local && env(local) ? env_int(local, 0, kMaxRanks) : 0;
  };
  if (env("OMPI_COMM_WORLD_SIZE")) {
    from(Launcher::Mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
  } else if (env("PMI_SIZE") && env("PMI_RANK")) {
    from(Launcher::Mpi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID");
  } else if (env("PMIX_RANK") && env("SLURM_NTASKS")) {
    from(Launcher::Mpi, "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID");
  } else if (env("WORLD_SIZE")) {
    from(Launcher::EnvVars, "RANK", "WORLD_SIZE", "LOCAL_RANK");
    if (info.world_size > 1) {
      if (!env("MASTER_ADDR")) fail("WORLD_SIZE is {} but MASTER_ADDR is not set (the host of rank 0)", info.world_size);
      info.master_addr = *env("MASTER_ADDR");
      info.master_port = env("MASTER_PORT") ? env_int("MASTER_PORT", 1, 65535) : 29500;
    }
  }
  // Messages name the rank from here on, before any communicator exists.
  g_rank = info.rank;
  g_world = info.world_size;
  return info;
}

std::unique_ptr<Communicator> cpu_world(const LaunchInfo& launch) {
  std::unique_ptr<Communicator> world;
  if (launch.launcher == Launcher::Mpi) {
    if (!mpi_available())
      fail("started by an MPI launcher ({} ranks) but this moetune was built without MPI (install libopenmpi-dev and "
           "rebuild)", launch.world_size);
    world = mpi_world_communicator();
  } else if (launch.world_size > 1) {
    fail("RANK/WORLD_SIZE say this is rank {} of {}, but the CPU engine's ranks talk through MPI: start them with "
         "mpirun -np {} (moetune finetune --nproc-per-node N does so itself)", launch.rank, launch.world_size,
         launch.world_size);
  } else {
    world = single_process_communicator();
  }
  note_world(*world);
  return world;
}

#if !MOETUNE_HAVE_CUDA
std::unique_ptr<Communicator> gpu_world(const LaunchInfo& launch) {
  if (launch.world_size > 1) fail("rank {} of {} on the GPU engine: {}", launch.rank, launch.world_size, cuda_unavailable_reason());
  return single_process_communicator();
}
#endif

void note_world(const Communicator& world) {
  g_rank = world.rank();
  g_world = world.size();
}

std::string rank_prefix() { return g_world > 1 ? fmt::format("rank {}: ", g_rank) : std::string(); }

}  // namespace moetune::parallel
