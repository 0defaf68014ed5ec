#include "moetune/cli/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "moetune/core/error.h"
#include "moetune/parallel/world.h"

namespace moetune::cli {

std::vector<std::string> arguments_without_nproc(int argc, char** argv) {
  std::vector<std::string> kept;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--nproc-per-node") {
      ++i;  // and its value
      continue;
    }
    if (argument.starts_with("--nproc-per-node=")) continue;
    kept.push_back(argument);
  }
  return kept;
}

void launch_local_ranks(int nproc_per_node, const std::vector<std::string>& arguments) {
  if (nproc_per_node < 1) fail("--nproc-per-node {}: it must be at least 1 (the ranks to start on this node)", nproc_per_node);
  const parallel::LaunchInfo launch = parallel::detect_launch();
  if (launch.launcher != parallel::Launcher::Single || launch.world_size > 1)
    fail("--nproc-per-node, but this process is already rank {} of a job of {}: start moetune either by a launcher "
         "(mpirun, srun, torchrun-style variables) or with --nproc-per-node, not both", launch.rank, launch.world_size);
  if (!parallel::mpi_available())
    fail("--nproc-per-node {}: this moetune was built without MPI, which connects its ranks (install libopenmpi-dev and "
         "openmpi-bin, then rebuild)", nproc_per_node);
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) fail("--nproc-per-node: cannot find this executable (/proc/self/exe): {}", error.message());
  std::vector<std::string> command = {"mpirun", "-np", std::to_string(nproc_per_node)};
  // More ranks than cores is slow but legal for the CPU engine; mpirun refuses it unless told.
  if (unsigned(nproc_per_node) > std::thread::hardware_concurrency()) command.push_back("--oversubscribe");
  command.push_back(self.string());
  command.insert(command.end(), arguments.begin(), arguments.end());
  if (geteuid() == 0) {  // Open MPI refuses root unless both are set (containers and CI run as root)
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::vector<char*> argv;
  for (std::string& part : command) argv.push_back(part.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execvp("mpirun", argv.data());
  fail("--nproc-per-node {}: cannot run mpirun ({}); install openmpi-bin or start the ranks with your launcher",
       nproc_per_node, std::strerror(errno));
}

}  // namespace moetune::cli
