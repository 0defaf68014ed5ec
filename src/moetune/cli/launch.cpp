#include "moetune/cli/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
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

namespace {

std::vector<pid_t> g_children;
volatile std::sig_atomic_t g_signalled = 0;

extern "C" void forward_signal(int signal) {
  g_signalled = 1;
  for (pid_t child : g_children)
    if (child > 0) ::kill(child, signal);
}

// A port nobody listens on now (the kernel's choice), unless MASTER_PORT names one.
int free_port() {
  if (const char* given = std::getenv("MASTER_PORT")) return std::atoi(given);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail("--nproc-per-node: cannot find a free port for the rendezvous: {}", std::strerror(errno));
  ::close(fd);
  return ntohs(address.sin_port);
}

// Starts the ranks as children and waits; the first to fail stops the others.
[[noreturn]] void spawn_ranks(int nproc_per_node, const std::filesystem::path& self, const std::vector<std::string>& arguments) {
  const std::string port = std::to_string(free_port());
  std::fflush(nullptr);
  for (int rank = 0; rank < nproc_per_node; ++rank) {
    const pid_t child = ::fork();
    if (child < 0) fail("--nproc-per-node: cannot start rank {}: {}", rank, std::strerror(errno));
    if (child == 0) {
      const std::string r = std::to_string(rank), n = std::to_string(nproc_per_node);
      setenv("RANK", r.c_str(), 1);
      setenv("LOCAL_RANK", r.c_str(), 1);
      setenv("WORLD_SIZE", n.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // no NVLink multicast (KINDS.md of the GPU machines says why)
      std::vector<std::string> command = {self.string()};
      command.insert(command.end(), arguments.begin(), arguments.end());
      std::vector<char*> argv;
      for (std::string& part : command) argv.push_back(part.data());
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      std::fprintf(stderr, "moetune: rank %d: cannot start %s: %s\n", rank, self.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    g_children.push_back(child);
  }
  std::signal(SIGINT, forward_signal);
  std::signal(SIGTERM, forward_signal);
  // A rank stuck in a collective does not answer SIGTERM's graceful stop: 20 s after the first stop (a failed
  // rank, or a signal from outside) the rest are killed.
  int status = 0;
  std::optional<std::chrono::steady_clock::time_point> stopping;
  for (size_t running = g_children.size(); running > 0;) {
    if (g_signalled && !stopping) stopping = std::chrono::steady_clock::now();
    if (stopping && std::chrono::steady_clock::now() - *stopping > std::chrono::seconds(20)) forward_signal(SIGKILL);
    int child_status = 0;
    const pid_t done = ::waitpid(-1, &child_status, WNOHANG);
    if (done < 0) break;
    if (done == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    --running;
    const auto rank = size_t(std::find(g_children.begin(), g_children.end(), done) - g_children.begin());
    if (rank < g_children.size()) g_children[rank] = -1;
    const bool failed = !WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0;
    if (failed && status == 0) {
      status = WIFEXITED(child_status) ? WEXITSTATUS(child_status) : 128 + WTERMSIG(child_status);
      std::fprintf(stderr, "moetune: rank %zu %s %d; stopping the other ranks\n", rank,
                   WIFEXITED(child_status) ? "exited with status" : "was killed by signal",
                   WIFEXITED(child_status) ? WEXITSTATUS(child_status) : WTERMSIG(child_status));
      forward_signal(SIGTERM);
    }
  }
  std::exit(status);
}

}  // namespace

void launch_local_ranks(int nproc_per_node, const std::vector<std::string>& arguments, bool gpu_engine) {
  if (nproc_per_node < 1) fail("--nproc-per-node {}: it must be at least 1 (the ranks to start on this node)", nproc_per_node);
  const parallel::LaunchInfo launch = parallel::detect_launch();
  if (launch.launcher != parallel::Launcher::Single || launch.world_size > 1)
    fail("--nproc-per-node, but this process is already rank {} of a job of {}: start moetune either by a launcher "
         "(mpirun, srun, torchrun-style variables) or with --nproc-per-node, not both", launch.rank, launch.world_size);
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) fail("--nproc-per-node: cannot find this executable (/proc/self/exe): {}", error.message());
  if (gpu_engine) spawn_ranks(nproc_per_node, self, arguments);
  if (!parallel::mpi_available())
    fail("--nproc-per-node {}: this moetune was built without MPI, which connects its ranks (install libopenmpi-dev and "
         "openmpi-bin, then rebuild)", nproc_per_node);
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
