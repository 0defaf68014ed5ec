// The TCP rendezvous that hands the NCCL id to ranks started without MPI: every rank gets rank 0's bytes, a
// port in use is an error naming it, and a rank 0 that never comes is an error after the timeout, not a hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "moetune/core/error.h"
#include "moetune/parallel/tcp_rendezvous.h"

namespace moetune {
namespace {

// A port bound here (so busy) and its number.
struct BusyPort {
  int fd = -1, port = 0;
  BusyPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd, 1);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
  }
  ~BusyPort() { ::close(fd); }
};

int free_port() {
  BusyPort probe;
  return probe.port;  // closed again when probe goes: free, barring a race with another program
}

TEST(Rendezvous, EveryRankGetsRankZerosBytes) {
  const int port = free_port();
  const std::string id(128, '\x7f');
  std::vector<std::future<std::string>> ranks;
  for (int rank = 0; rank < 3; ++rank)
    ranks.push_back(std::async(std::launch::async, [=] {
      return parallel::rendezvous_broadcast("127.0.0.1", port, rank, 3, rank == 0 ? id : std::string(), 20);
    }));
  for (auto& rank : ranks) EXPECT_EQ(rank.get(), id);
}

TEST(Rendezvous, PortInUseIsAClearError) {
  BusyPort busy;
  try {
    parallel::rendezvous_broadcast("127.0.0.1", busy.port, 0, 2, "id", 2);
    FAIL() << "rank 0 listened on a port in use";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(busy.port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT"), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, MissingRanksTimeOutInsteadOfHanging) {
  const int port = free_port();
  try {
    parallel::rendezvous_broadcast("127.0.0.1", port, 0, 2, "id", 1);
    FAIL() << "rank 0 returned without rank 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 ranks connected within 1 s"), std::string::npos) << e.what();
  }
  try {
    parallel::rendezvous_broadcast("127.0.0.1", free_port(), 1, 2, "", 1);
    FAIL() << "rank 1 returned without rank 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune
