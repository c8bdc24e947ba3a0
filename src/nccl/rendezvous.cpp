// Communicator::from_file and Communicator::from_env: getting rank 0's UniqueId to the
// other ranks.
//
// The environment rendezvous is a one-shot TCP exchange on MASTER_ADDR:MASTER_PORT, not a
// key-value store: rank 0 listens (all interfaces, IPv4 and IPv6), every other rank connects
// (retrying until the timeout: rank 0 may start later), says hello with its rank, and reads
// the 128 id bytes. The listener closes once every rank was served or the timeout passed.
// Rejected: reusing torch's TCPStore wire protocol (a dependency on an unversioned protocol
// for one 128-byte message), and a shared file system (from_file covers it explicitly).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/files.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "nccl/communicator_impl.hpp"

namespace cudakit::nccl {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

constexpr char kHello[8] = {'c', 'k', 'r', 'd', 'v', '0', '0', '1'};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int env_int(const char* name, bool required, int fallback, int min_value) {
  const std::string v = env(name);
  if (v.empty()) {
    if (!required) return fallback;
    throw ValueError(std::string("Communicator.from_env(): environment variable ") + name +
                     " is not set (set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as "
                     "torchrun and `python -m cudakit.launch` do)");
  }
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || n < min_value || n > 1 << 30) {
    throw ValueError(std::string("Communicator.from_env(): environment variable ") + name + "='" +
                     v + "' is not an integer >= " + std::to_string(min_value));
  }
  return static_cast<int>(n);
}

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Sends / receives exactly n bytes before `deadline`; false on error, close or timeout.
bool io_all(int fd, void* buf, std::size_t n, bool sending, steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) <= 0) continue;
    ssize_t k = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

Socket listen_on(int port, std::string* error) {
  for (int family : {AF_INET6, AF_INET}) {
    Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) continue;
    int one = 1, zero = 0;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
      ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 too
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<std::uint16_t>(port));
      rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc == 0 && ::listen(s.fd(), 128) == 0) return s;
    *error = std::strerror(errno);
    if (errno == EADDRINUSE) break;  // the other family would fail the same way
  }
  return Socket();
}

// Rank 0: serves `id` to world_size - 1 ranks, in the background, until all were served or
// the deadline passed.
void serve(Socket listener, UniqueId id, int world_size, steady_clock::time_point deadline) {
  std::thread([listener = std::move(listener), id, world_size, deadline]() mutable {
    int served = 0;
    while (served < world_size - 1 && steady_clock::now() < deadline) {
      pollfd pfd{listener.fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 200) <= 0) continue;
      Socket c(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      char hello[sizeof kHello + 4];
      const auto t = std::min(deadline, steady_clock::now() + std::chrono::seconds(10));
      if (!io_all(c.fd(), hello, sizeof hello, false, t)) continue;
      if (std::memcmp(hello, kHello, sizeof kHello) != 0) continue;  // not one of ours
      if (io_all(c.fd(), id.bytes.data(), id.bytes.size(), true, t)) ++served;
    }
  }).detach();
}

UniqueId fetch(const std::string& host, int port, int rank, steady_clock::time_point deadline,
               milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port_text = std::to_string(port);
  std::string last = "no attempt";
  for (;;) {
    addrinfo* list = nullptr;
    int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &list);
    if (gai != 0) {
      last = std::string("cannot resolve MASTER_ADDR='") + host + "': " + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = list; ai; ai = ai->ai_next) {
        Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
        if (!s) continue;
        if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
          last = std::string("connect: ") + std::strerror(errno);
          continue;
        }
        char hello[sizeof kHello + 4];
        std::memcpy(hello, kHello, sizeof kHello);
        std::memcpy(hello + sizeof kHello, &rank, 4);
        UniqueId id;
        if (io_all(s.fd(), hello, sizeof hello, true, deadline) &&
            io_all(s.fd(), id.bytes.data(), id.bytes.size(), false, deadline)) {
          ::freeaddrinfo(list);
          return id;
        }
        last = "rank 0 closed the connection before sending the id";
      }
      ::freeaddrinfo(list);
    }
    if (steady_clock::now() >= deadline) {
      throw NcclError(result::remote_error,
                      "Communicator.from_env(): rank " + std::to_string(rank) +
                          " could not get the communicator id from rank 0 at " + host + ":" +
                          port_text + " within " + std::to_string(timeout.count()) +
                          " ms (" + last + ")",
                      /*timed_out=*/true);
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

steady_clock::time_point deadline_of(milliseconds timeout) {
  return timeout.count() > 0 ? steady_clock::now() + timeout
                             : steady_clock::now() + std::chrono::hours(24 * 365);
}

void check_world(int world_size, int rank, const char* fn) {
  if (world_size < 1) {
    throw ValueError(std::string(fn) + ": world_size must be at least 1, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ValueError(std::string(fn) + ": rank must be in [0, " + std::to_string(world_size) +
                     "), got " + std::to_string(rank));
  }
}

}  // namespace

Communicator Communicator::from_env(CommOptions options) {
  const int rank = env_int("RANK", true, 0, 0);
  const int world = env_int("WORLD_SIZE", true, 0, 1);
  const std::string host = env("MASTER_ADDR");
  if (host.empty()) env_int("MASTER_ADDR", true, 0, 0);  // throws: not set
  const int port = env_int("MASTER_PORT", true, 0, 1);
  if (port > 65535) {
    throw ValueError("Communicator.from_env(): environment variable MASTER_PORT='" +
                     env("MASTER_PORT") + "' is not a TCP port (1..65535)");
  }
  check_world(world, rank, "Communicator.from_env()");
  if (options.device == kCurrentDevice) {
    const int local = env_int("LOCAL_RANK", false, -1, 0);
    if (local >= 0) {
      const int count = device_count();
      if (count < 1) throw ValueError("Communicator.from_env(): no device is visible");
      options.device = local % count;
    }
  }
  const auto deadline = deadline_of(options.timeout);
  UniqueId id;
  if (rank == 0) {
    id = unique_id();
    if (world > 1) {
      std::string error;
      Socket listener = listen_on(port, &error);
      if (!listener) {
        throw NcclError(result::system_error,
                        "Communicator.from_env(): rank 0 cannot listen on port " +
                            std::to_string(port) + " (" + error +
                            "); pick a free MASTER_PORT (a launcher's own store may hold it: "
                            "use Communicator.from_file there)");
      }
      serve(std::move(listener), id, world, deadline);
    }
  } else {
    id = fetch(host, port, rank, deadline, options.timeout);
  }
  return Communicator(world, id, rank, options);
}

Communicator Communicator::from_file(const std::string& path, int world_size, int rank,
                                     CommOptions options) {
  check_world(world_size, rank, "Communicator.from_file()");
  if (path.empty()) throw ValueError("Communicator.from_file(): argument 'path' is empty");
  namespace fs = std::filesystem;
  UniqueId id;
  if (rank == 0) {
    id = unique_id();
    // Through a sibling renamed over `path` (core/files.hpp): readers see the whole id or
    // nothing.
    const std::string_view bytes(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
    if (const int err = detail::write_file_atomically(path, {bytes}); err != 0) {
      throw NcclError(result::system_error, "Communicator.from_file(): cannot create " + path +
                                                ": " + std::strerror(err));
    }
  } else {
    const auto deadline = deadline_of(options.timeout);
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(id.bytes.data()),
                        static_cast<std::streamsize>(id.bytes.size()))) {
        break;
      }
      if (steady_clock::now() >= deadline) {
        throw NcclError(result::remote_error,
                        "Communicator.from_file(): rank " + std::to_string(rank) + " waited " +
                            std::to_string(options.timeout.count()) + " ms for rank 0 to write " +
                            path,
                        /*timed_out=*/true);
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  if (rank != 0) return Communicator(world_size, id, rank, options);
  try {
    Communicator c(world_size, id, rank, options);
    c.impl()->remove_when_ready(path);
    return c;
  } catch (...) {
    std::error_code ec;
    fs::remove(path, ec);  // a failed job leaves no id behind for the next one to trip on
    throw;
  }
}

}  // namespace cudakit::nccl
