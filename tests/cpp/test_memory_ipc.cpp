// IPC of memory in expandable segments (ipc.cpp, issue 15 item 1), on every backend: the
// emulated backend shares its memfd chunks, the cuda backend its cuMemCreate chunks as POSIX
// file descriptors. Cross-process tests re-run this binary as the *exporter* and import in
// this process: an ancestor may always take descriptors of its descendants with pidfd_getfd,
// whatever Yama's ptrace_scope says (the other direction needs ptrace_scope 0).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"

extern char** environ;

using namespace cudakit;

namespace {
constexpr const char* kRoleEnv = "CUDAKIT_TEST_EXPIPC";  // "<mode>:<write fd>:<read fd>"
constexpr std::size_t kMiB = std::size_t{1} << 20;
// Spans several 8 MiB chunks of the large pool and starts inside one (after kLead bytes).
constexpr std::size_t kLead = 5 * kMiB, kBytes = 19 * kMiB + 12345;

void use_expandable() { set_allocator_settings("expandable_segments:True"); }

std::string to_text(const IpcMemHandle& h) {
  std::string out;
  char buf[3];
  auto hex = [&](const unsigned char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", p[i]);
      out += buf;
    }
  };
  hex(h.bytes, sizeof h.bytes);
  out += ":";
  hex(h.chunks.data(), h.chunks.size());
  return out + ":" + std::to_string(h.device) + ":" + std::to_string(h.offset) + ":" +
         std::to_string(h.size) + "\n";
}

IpcMemHandle from_text(const std::string& s) {
  IpcMemHandle h;
  const std::size_t c1 = s.find(':'), c2 = s.find(':', c1 + 1);
  for (std::size_t i = 0; i < sizeof h.bytes; ++i)
    h.bytes[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  for (std::size_t i = c1 + 1; i + 1 < c2; i += 2)
    h.chunks.push_back(static_cast<unsigned char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  unsigned long long off = 0, size = 0;
  std::sscanf(s.c_str() + c2, ":%d:%llu:%llu", &h.device, &off, &size);
  h.offset = off;
  h.size = size;
  return h;
}

unsigned char pattern(std::size_t i, int salt) {
  return static_cast<unsigned char>((i * 131u + static_cast<unsigned>(salt)) & 0xff);
}

void fill(void* dev, std::size_t n, int salt, int device) {
  std::vector<unsigned char> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = pattern(i, salt);
  Stream s(device);
  detail::backend().memcpy_async(dev, host.data(), n, s.handle());
  s.sync();
}

bool holds(const void* dev, std::size_t n, int salt, int device) {
  std::vector<unsigned char> host(n);
  Stream s(device);
  detail::backend().memcpy_async(host.data(), dev, n, s.handle());
  s.sync();
  for (std::size_t i = 0; i < n; ++i)
    if (host[i] != pattern(i, salt)) return false;
  return true;
}

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string read_line(int fd) {
  std::string out;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') out += c;
  return out;
}

// The exporter process, run by parent tests through spawn_exporter.
struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;  // pipes to / from the child
  std::string send_and_read(const std::string& line) {
    write_all(to, line + "\n");
    return read_line(from);
  }
  int wait() {
    if (to >= 0) ::close(to);
    if (from >= 0) ::close(from);
    to = from = -1;
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~Child() { wait(); }
};

bool spawn_exporter(const std::string& mode, Child& c) {
  int down[2], up[2];  // parent -> child, child -> parent
  if (::pipe(down) != 0) return false;
  if (::pipe(up) != 0) return false;
  const std::string role =
      std::string(kRoleEnv) + "=" + mode + ":" + std::to_string(up[1]) + ":" + std::to_string(down[0]);
  std::vector<std::string> envs{role};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kRoleEnv, std::strlen(kRoleEnv)) != 0) envs.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=ExpandableIpc.ExporterChild";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  // Our ends must not stay open in the child (EOF detection).
  ::fcntl(down[1], F_SETFD, FD_CLOEXEC);
  ::fcntl(up[0], F_SETFD, FD_CLOEXEC);
  const int rc = posix_spawn(&c.pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data());
  ::close(down[0]);
  ::close(up[1]);
  c.to = down[1];
  c.from = up[0];
  return rc == 0;
}

bool fd_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }
}  // namespace

// Runs only as the child of the tests below. Exports an allocation written with pattern 1,
// sends the handle, then obeys the parent:
//   "data":  on "check", verifies the parent's pattern 2 and answers "ok" / "bad";
//   "stale": on "release", frees the allocation, empties the cache (its chunks and their
//            descriptors go), exports a fresh allocation (so descriptor numbers are reused)
//            and answers "released";
//   "exit":  exits right after sending the handle;
//   "mixed": as "data", after a 600 MiB allocation in front: the pool has grown past 512 MiB,
//            so its chunks grow to 16 MiB and the export spans chunks of 16 and 8 MiB.
TEST(ExpandableIpc, ExporterChild) {
  const char* env = std::getenv(kRoleEnv);
  if (!env) GTEST_SKIP() << "runs as a child process of the ExpandableIpc tests";
  char mode[16] = {};
  int out = -1, in = -1;
  ASSERT_EQ(std::sscanf(env, "%15[a-z]:%d:%d", mode, &out, &in), 3);
  use_expandable();
  const bool mixed = std::strcmp(mode, "mixed") == 0;
  void* lead = caching_allocator_alloc(mixed ? 600 * kMiB : kLead);
  void* p = caching_allocator_alloc(kBytes);
  fill(p, kBytes, 1, current_device());
  IpcMemHandle h;
  try {
    h = ipc_export(p);
  } catch (const std::exception& e) {
    write_all(out, std::string("error ") + e.what() + "\n");
    return;
  }
  write_all(out, to_text(h));
  if (std::strcmp(mode, "exit") == 0) return;
  const std::string cmd = read_line(in);
  if ((std::strcmp(mode, "data") == 0 || mixed) && cmd == "check") {
    write_all(out, holds(p, kBytes, 2, h.device) ? "ok\n" : "bad\n");
    read_line(in);  // the parent closes the pipe when done
  } else if (std::strcmp(mode, "stale") == 0 && cmd == "release") {
    caching_allocator_delete(p);
    caching_allocator_delete(lead);
    empty_cache();
    void* q = caching_allocator_alloc(kBytes);
    ipc_export(q);
    write_all(out, "released\n");
    read_line(in);
    caching_allocator_delete(q);
    return;
  }
  caching_allocator_delete(p);
  caching_allocator_delete(lead);
}

// A handle of memory in an expandable segment: header + chunk table; exporting again gives
// the same handle (descriptors made once per chunk); importing in the exporter is refused.
TEST(ExpandableIpc, HandleFormatAndSameProcess) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  use_expandable();
  void* lead = caching_allocator_alloc(kLead);
  void* p = caching_allocator_alloc(kBytes);
  IpcMemHandle h;
  try {
    h = ipc_export(p);
  } catch (const NotSupportedError& e) {  // cuda: the driver refused shareable chunks
    caching_allocator_delete(p);
    caching_allocator_delete(lead);
    GTEST_SKIP() << e.what();
  }
  EXPECT_EQ(std::memcmp(h.bytes, "ckVMipc2", 8), 0);
  EXPECT_FALSE(h.chunks.empty());
  EXPECT_EQ(h.chunks.size() % 32, 0u);
  EXPECT_GT(h.offset, 0u);  // the allocation starts inside its first chunk
  EXPECT_EQ(h.size, kBytes);
  const std::size_t n = h.chunks.size() / 32;
  EXPECT_GE(n, 3u);  // 19 MiB over 8 MiB chunks
  IpcMemHandle again = ipc_export(p);
  EXPECT_EQ(std::memcmp(h.bytes, again.bytes, sizeof h.bytes), 0);
  EXPECT_EQ(h.chunks, again.chunks);
  EXPECT_THROW(ipc_import(h), ValueError);
  // The exported descriptors stay open while the memory is mapped here, and close when the
  // chunks are unmapped (empty_cache after the free).
  std::vector<int> fds;
  for (std::size_t i = 0; i < n; ++i) {
    std::int32_t fd;
    std::memcpy(&fd, h.chunks.data() + i * 32, sizeof fd);
    fds.push_back(fd);
    EXPECT_TRUE(fd_open(fd)) << fd;
  }
  caching_allocator_delete(p);
  caching_allocator_delete(lead);
  empty_cache();
  for (int fd : fds) EXPECT_FALSE(fd_open(fd)) << fd;
}

TEST(ExpandableIpc, MalformedHandlesAreValueErrors) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  IpcMemHandle h;
  std::memcpy(h.bytes, "ckVMipc2", 8);
  h.device = 0;
  h.size = 16;
  EXPECT_THROW(ipc_import(h), ValueError);  // expandable header without its chunk table
  h.chunks.assign(31, 0);
  EXPECT_THROW(ipc_import(h), ValueError);  // table length does not match the header
  IpcMemHandle plain;
  plain.device = 0;
  plain.size = 16;
  plain.chunks.assign(32, 0);
  EXPECT_THROW(ipc_import(plain), ValueError);  // table without the expandable header
  // A well-formed header, for a process that does not exist (pid 0x7fffffff is above
  // pid_max): a clear error naming the exporting process.
  struct {
    char magic[8];
    std::int32_t pid;
    std::uint32_t count;
    std::uint64_t chunk;
  } hd{{'c', 'k', 'V', 'M', 'i', 'p', 'c', '2'}, 0x7fffffff, 1,
       detail::backend().vm_granularity(0)};
  std::memcpy(h.bytes, &hd, sizeof hd);
  h.chunks.assign(32, 0);
  EXPECT_THROW(ipc_import(h), ValueError);  // a chunk of 0 units
  h.chunks[4] = 1;                          // VmChunk::units = 1
  try {
    ipc_import(h);
    ADD_FAILURE() << "imported a handle of a process that does not exist";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("2147483647"), std::string::npos) << e.what();
  }
}

// Data written by the exporter is seen by the importer and the other way round.
TEST(ExpandableIpc, ChildExportsParentImports) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  Child c;
  ASSERT_TRUE(spawn_exporter("data", c));
  const std::string line = read_line(c.from);
  if (line.rfind("error ", 0) == 0) GTEST_SKIP() << line;  // cuda: no shareable chunks
  IpcMemHandle h = from_text(line);
  ASSERT_EQ(h.size, kBytes);
  void* p = nullptr;
  try {
    p = ipc_import(h);
  } catch (const IoError& e) {
    if (e.error_number() == EPERM) GTEST_SKIP() << e.what();  // ptrace forbidden here
    throw;
  }
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(holds(p, kBytes, 1, h.device)) << "the importer does not see the exporter's data";
  // A second import of the same handle shares the mapping.
  void* p2 = ipc_import(h);
  EXPECT_EQ(p2, p);
  fill(p, kBytes, 2, h.device);
  EXPECT_EQ(c.send_and_read("check"), "ok") << "the exporter does not see the importer's data";
  EXPECT_EQ(c.wait(), 0);
  // The exporter is gone; the imported memory stays valid until closed here.
  EXPECT_TRUE(holds(p, kBytes, 2, h.device));
  ipc_close(p);
  ipc_collect();  // the second import still holds the mapping
  EXPECT_TRUE(holds(p, kBytes, 2, h.device));
  ipc_close(p2);  // each import has its own close
  EXPECT_THROW(ipc_close(p), ValueError);
  ipc_collect();
}

// Chunks of different sizes (a large pool past 512 MiB maps 16 MiB chunks, and 8 MiB ones
// where alignment asks): the chunk table carries each chunk's size, and the importer maps
// them back to back at the exporter's offsets.
TEST(ExpandableIpc, ChunksOfDifferentSizes) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  Child c;
  ASSERT_TRUE(spawn_exporter("mixed", c));
  const std::string line = read_line(c.from);
  if (line.rfind("error ", 0) == 0) GTEST_SKIP() << line;
  IpcMemHandle h = from_text(line);
  ASSERT_EQ(h.size, kBytes);
  std::uint64_t unit;
  std::memcpy(&unit, h.bytes + 16, sizeof unit);
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (std::size_t i = 0; i * 32 < h.chunks.size(); ++i) {
    std::uint32_t units;
    std::memcpy(&units, h.chunks.data() + i * 32 + 4, sizeof units);
    sizes.push_back(units * unit);
    total += sizes.back();
  }
  ASSERT_GE(sizes.size(), 2u);
  EXPECT_EQ(sizes.front(), 16 * kMiB) << "the pool's chunks did not grow past 512 MiB";
  EXPECT_NE(*std::min_element(sizes.begin(), sizes.end()),
            *std::max_element(sizes.begin(), sizes.end()))
      << "all chunks of one size: the test no longer covers mixed sizes";
  EXPECT_GE(total, h.offset + h.size);
  EXPECT_GT(h.offset, 0u);
  void* p = nullptr;
  try {
    p = ipc_import(h);
  } catch (const IoError& e) {
    if (e.error_number() == EPERM) GTEST_SKIP() << e.what();
    throw;
  }
  EXPECT_TRUE(holds(p, kBytes, 1, h.device)) << "the importer does not see the exporter's data";
  fill(p, kBytes, 2, h.device);
  EXPECT_EQ(c.send_and_read("check"), "ok") << "the exporter does not see the importer's data";
  EXPECT_EQ(c.wait(), 0);
  ipc_close(p);
  ipc_collect();
}

// A handle whose chunks the exporter released (descriptor numbers since reused for other
// memory), and a handle whose exporter exited: clear errors, nothing left mapped.
TEST(ExpandableIpc, StaleHandlesGiveClearErrors) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  {
    Child c;
    ASSERT_TRUE(spawn_exporter("stale", c));
    const std::string line = read_line(c.from);
    if (line.rfind("error ", 0) == 0) GTEST_SKIP() << line;
    IpcMemHandle h = from_text(line);
    ASSERT_EQ(c.send_and_read("release"), "released");
    try {
      ipc_import(h);
      ADD_FAILURE() << "imported a handle whose memory was released";
    } catch (const IoError& e) {
      if (e.error_number() == EPERM) GTEST_SKIP() << e.what();
      ADD_FAILURE() << e.what();
    } catch (const Error& e) {
      std::printf("released chunks: %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.wait(), 0);
  }
  {
    Child c;
    ASSERT_TRUE(spawn_exporter("exit", c));
    const std::string line = read_line(c.from);
    if (line.rfind("error ", 0) == 0) GTEST_SKIP() << line;
    IpcMemHandle h = from_text(line);
    EXPECT_EQ(c.wait(), 0);  // exited and reaped
    try {
      ipc_import(h);
      ADD_FAILURE() << "imported a handle of an exited process";
    } catch (const Error& e) {
      std::printf("exited exporter: %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
    }
  }
  ipc_collect();
}

// The backend half, directly: descriptors of physical memory round-trip, and descriptors of
// anything else are refused (emulated; cuda's driver checks its own).
TEST(ExpandableIpc, BackendExportImportFd) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  detail::Backend& b = detail::backend();
  const std::size_t g = b.vm_granularity(0);
  detail::PhysMemHandle ph = b.vm_create(0, g);
  ASSERT_NE(ph, 0u);
  int fd = -1;
  try {
    fd = b.vm_export_fd(ph);
  } catch (const NotSupportedError& e) {
    b.vm_destroy(ph);
    GTEST_SKIP() << e.what();
  }
  ASSERT_GE(fd, 0);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  detail::PhysMemHandle imported = b.vm_import_fd(0, fd, g);
  ::close(fd);
  std::uintptr_t a = b.vm_reserve(0, g), c = b.vm_reserve(0, g);
  b.vm_map(a, g, ph, 0);
  b.vm_map(c, g, imported, 0);
  const unsigned char v = 0x5a;
  Stream s(0);
  b.memset_d8_async(reinterpret_cast<void*>(a), v, g, s.handle());
  s.sync();
  unsigned char got = 0;
  b.memcpy_async(&got, reinterpret_cast<void*>(c + g - 1), 1, s.handle());
  s.sync();
  EXPECT_EQ(got, v) << "the imported handle does not share the physical memory";
  b.vm_unmap(a, g);
  b.vm_unmap(c, g);
  b.vm_destroy(ph);
  b.vm_destroy(imported);
  b.vm_release(a, g);
  b.vm_release(c, g);
  if (!b.capabilities().host_addressable_device_memory) return;  // emulated checks below
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  try {
    b.vm_import_fd(0, null_fd, g);
    ADD_FAILURE() << "imported /dev/null";
  } catch (const AcceleratorError& e) {
    EXPECT_EQ(e.code(), errc::invalid_value);
  }
  ::close(null_fd);
  ph = b.vm_create(0, g);
  fd = b.vm_export_fd(ph);
  EXPECT_THROW(b.vm_import_fd(0, fd, 2 * g), AcceleratorError);  // wrong size
  ::close(fd);
  b.vm_destroy(ph);
}

// Exported chunks are destroyed when unmapped, never kept as spares for another allocation
// (an importer may still map their physical memory): the page move of
// MemoryAllocator.ExpandableSegmentsMovePagesWithinBudget, with the hole's chunks exported.
TEST(ExpandableIpc, ExportedChunksAreNotReusedAsSpares) {
  if (std::getenv(kRoleEnv)) GTEST_SKIP();
  memory::DeviceAllocator a(0, detail::backend(),
                            memory::AllocatorConfig::parse("expandable_segments:True"));
  auto* x = a.malloc(64 * kMiB, nullptr);
  auto* y = a.malloc(64 * kMiB, nullptr);
  memory::DeviceAllocator::ExpandableShare share;
  try {
    ASSERT_TRUE(a.share_expandable(reinterpret_cast<void*>(x->ptr), share));
  } catch (const NotSupportedError& e) {
    a.free(reinterpret_cast<void*>(x->ptr));
    a.free(reinterpret_cast<void*>(y->ptr));
    a.empty_cache();
    GTEST_SKIP() << e.what();
  }
  ASSERT_EQ(share.chunks.size(), 8u);  // 64 MiB of 8 MiB chunks
  EXPECT_EQ(share.va, x->ptr);
  a.free(reinterpret_cast<void*>(x->ptr));  // a 64 MiB hole in front of y, exported
  const auto& calls = a.vm_calls();
  const auto created = calls.create.load(), destroyed = calls.destroy.load();
  auto* z = a.malloc(100 * kMiB, nullptr);  // does not fit the hole: pages move
  const auto s = a.stats();
  EXPECT_EQ(calls.reused.load(), 0u) << "an exported chunk was mapped again as a spare";
  EXPECT_EQ(calls.destroy.load() - destroyed, 8u) << "the exported chunks were released";
  EXPECT_EQ(calls.create.load() - created, (100 * kMiB + 8 * kMiB - 1) / (8 * kMiB));
  const std::int64_t live_hwm = 164 * kMiB;
  EXPECT_LE(s.reserved_bytes[0].peak, live_hwm + live_hwm / 32);
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<std::int64_t>(64 * kMiB + 104 * kMiB));
  a.free(reinterpret_cast<void*>(y->ptr));
  a.free(reinterpret_cast<void*>(z->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(calls.create.load(), calls.destroy.load()) << "every physical chunk released";
}
