#include "jiterator/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/files.hpp"

namespace cudakit::jit {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'J', 'I', 'T', '0', '0', '1'};
constexpr std::size_t kHeader = 8 + 3 * 8;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// mkdir -p; components we create are 0700.
bool make_dirs(const std::string& path, std::string& why) {
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      why = "cannot create " + partial + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

bool read_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

std::uint64_t checksum(std::string_view key, const char* image, std::size_t size) {
  return fnv1a64(std::string_view(image, size), fnv1a64(key));
}

std::string default_dir(std::string& why) {
  if (env("CUDAKIT_JITERATOR_DISK_CACHE") == "0") {
    why = "disabled by CUDAKIT_JITERATOR_DISK_CACHE=0";
    return "";
  }
  if (std::string d = env("CUDAKIT_CACHE_DIR"); !d.empty()) return d + "/jiterator";
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/cudakit/jiterator";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/cudakit/jiterator";
  why = "no cache directory: set CUDAKIT_CACHE_DIR (HOME and XDG_CACHE_HOME are unset)";
  return "";
}

}  // namespace

std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

DiskCache& DiskCache::instance() {
  static DiskCache* cache = [] {
    std::string why;
    std::string dir = default_dir(why);
    auto* c = new DiskCache(dir);  // leaked: used until exit, no destructor ordering worries
    if (dir.empty()) c->reason_ = why;
    return c;
  }();
  return *cache;
}

DiskCache::DiskCache(std::string dir) {
  if (dir.empty()) {
    reason_ = "disabled";
    return;
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string why;
  if (!make_dirs(dir, why)) {
    reason_ = why;
    return;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    reason_ = dir + " is not a directory";
    return;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    reason_ = dir + " is not private to this user (owner or group/other write permission): "
                    "cached kernels are code this process runs, so the cache is off";
    return;
  }
  dir_ = std::move(dir);
}

DiskCache::Lookup DiskCache::read(const std::string& file, const std::string& key,
                                  std::vector<char>& image) const {
  if (dir_.empty()) return Lookup::miss;
  const std::string path = dir_ + "/" + file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Lookup::miss;
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Lookup::miss;
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  char header[kHeader];
  if (file_size < kHeader || !read_all(fd, header, kHeader) ||
      std::memcmp(header, kMagic, 8) != 0)
    return Lookup::rejected;
  std::uint64_t key_size = 0, image_size = 0, sum = 0;
  std::memcpy(&key_size, header + 8, 8);
  std::memcpy(&image_size, header + 16, 8);
  std::memcpy(&sum, header + 24, 8);
  if (key_size != key.size() || image_size == 0 || image_size > file_size ||
      kHeader + key_size + image_size != file_size)
    return Lookup::rejected;
  std::string stored_key(key_size, '\0');
  if (!read_all(fd, stored_key.data(), key_size) || stored_key != key) return Lookup::rejected;
  std::vector<char> bytes(image_size);
  if (!read_all(fd, bytes.data(), image_size) || checksum(key, bytes.data(), bytes.size()) != sum)
    return Lookup::rejected;
  image = std::move(bytes);
  return Lookup::hit;
}

bool DiskCache::write(const std::string& file, const std::string& key,
                      const std::vector<char>& image) const {
  if (dir_.empty() || image.empty()) return false;
  char header[kHeader];
  const std::uint64_t key_size = key.size(), image_size = image.size();
  const std::uint64_t sum = checksum(key, image.data(), image.size());
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, &key_size, 8);
  std::memcpy(header + 16, &image_size, 8);
  std::memcpy(header + 24, &sum, 8);
  return detail::write_file_atomically(
             dir_ + "/" + file,
             {std::string_view(header, kHeader), key, std::string_view(image.data(), image.size())},
             0600) == 0;
}

}  // namespace cudakit::jit
