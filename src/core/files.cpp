// File helpers (core/files.hpp).
#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

namespace cudakit::detail {
namespace {

int write_all(int fd, std::string_view data) {
  const char* p = data.data();
  std::size_t n = data.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

}  // namespace

int write_file_atomically(const std::string& path, std::initializer_list<std::string_view> parts,
                          mode_t mode) {
  static std::atomic<unsigned long long> counter{0};
  // Unique per process and call, in the same directory (rename is atomic within a file system).
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  int err = 0;
  for (std::string_view part : parts) {
    if ((err = write_all(fd, part)) != 0) break;
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) ::unlink(tmp.c_str());
  return err;
}

std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  char* real = ::realpath(path.c_str(), nullptr);
  std::string r = real ? real : path;
  std::free(real);
  return r + " size=" + std::to_string(st.st_size) + " mtime=" +
         std::to_string(static_cast<long long>(st.st_mtim.tv_sec)) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace cudakit::detail
