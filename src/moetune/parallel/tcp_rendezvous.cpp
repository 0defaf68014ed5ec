#include "moetune/parallel/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "moetune/core/error.h"

namespace moetune::parallel {
namespace {

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

void send_all(int fd, const void* data, size_t size, const std::string& where) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (sent <= 0) fail("rendezvous with {}: send failed: {}", where, std::strerror(errno));
    bytes += sent;
    size -= size_t(sent);
  }
}

void receive_all(int fd, void* data, size_t size, const std::string& where, int timeout_seconds) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_seconds * 1000) <= 0) fail("rendezvous with {}: no answer within {} s", where, timeout_seconds);
    const ssize_t got = ::recv(fd, bytes, size, 0);
    if (got <= 0) fail("rendezvous with {}: the connection closed early (did another rank fail?)", where);
    bytes += got;
    size -= size_t(got);
  }
}

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (status != 0) fail("rendezvous: cannot resolve MASTER_ADDR '{}': {}", host, gai_strerror(status));
  return found;
}

}  // namespace

std::string rendezvous_broadcast(const std::string& master_addr, int master_port, int rank, int world_size,
                                 const std::string& blob, int timeout_seconds) {
  const std::string where = fmt::format("{}:{}", master_addr, master_port);
  if (rank == 0) {
    addrinfo* address = resolve(master_addr, master_port, true);
    Socket listener(::socket(address->ai_family, SOCK_STREAM, 0));
    const int yes = 1;
    ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const int bound = ::bind(listener.fd(), address->ai_addr, address->ai_addrlen);
    const int bind_errno = errno;
    ::freeaddrinfo(address);
    if (bound != 0)
      fail("rendezvous: rank 0 cannot listen on {} ({}); choose another MASTER_PORT", where, std::strerror(bind_errno));
    ::listen(listener.fd(), world_size);
    std::vector<Socket> peers;
    for (int connected = 1; connected < world_size; ++connected) {
      pollfd p{listener.fd(), POLLIN, 0};
      if (::poll(&p, 1, timeout_seconds * 1000) <= 0)
        fail("rendezvous on {}: {} of {} ranks connected within {} s", where, connected, world_size, timeout_seconds);
      peers.emplace_back(::accept(listener.fd(), nullptr, nullptr));
      if (peers.back().fd() < 0) fail("rendezvous on {}: accept failed: {}", where, std::strerror(errno));
    }
    const uint64_t size = blob.size();
    for (const Socket& peer : peers) {
      send_all(peer.fd(), &size, sizeof size, where);
      send_all(peer.fd(), blob.data(), blob.size(), where);
    }
    return blob;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (true) {  // rank 0 may not be listening yet
    addrinfo* address = resolve(master_addr, master_port, false);
    Socket peer(::socket(address->ai_family, SOCK_STREAM, 0));
    const int connected = ::connect(peer.fd(), address->ai_addr, address->ai_addrlen);
    ::freeaddrinfo(address);
    if (connected == 0) {
      uint64_t size = 0;
      receive_all(peer.fd(), &size, sizeof size, where, timeout_seconds);
      if (size > (1u << 20)) fail("rendezvous with {}: a {}-byte message is not one of ours", where, size);
      std::string received(size, '\0');
      receive_all(peer.fd(), received.data(), size, where, timeout_seconds);
      return received;
    }
    if (std::chrono::steady_clock::now() > deadline)
      fail("rendezvous: rank {} could not reach rank 0 at {} within {} s", rank, where, timeout_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace moetune::parallel
