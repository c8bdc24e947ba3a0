// GPUDirect Storage through the public C++ API (cudakit::gds) and the engine's parsers:
// round trips at aligned and unaligned offsets across chunk boundaries, stream-ordered
// transfers, concurrent transfers, buffer registration, and the errors (missing directory,
// read past the end, wrong open flags, host memory, registration state, CUDAKIT_GDS).
// Runs on the emulated backend in CI (the compat path) and on the GPU with
// CUDAKIT_TEST_BACKEND=cuda (gds or compat, whichever the machine allows). ctest runs it
// again with CUDAKIT_GDS_DIRECT=never and =always, and with CUDAKIT_EMULATED_GDS=1 (the
// emulated backend's model of a GDS machine: the gds path).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/gds.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "gds/engine.hpp"
#include "gds/policy.hpp"
#include "graphs_test_util.hpp"
#include "hang_watchdog.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;
namespace fs = std::filesystem;

namespace {

// Small chunks (set before the engine starts), so small files cross many chunk boundaries.
const bool kEngineEnv = [] {
  ::setenv("CUDAKIT_GDS_CHUNK", "64K", 0);
  ::setenv("CUDAKIT_GDS_THREADS", "4", 0);
  return true;
}();

class Gds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no device";
    ::unsetenv("CUDAKIT_GDS");
    char tmpl[] = "/tmp/cudakit_gds_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    ::unsetenv("CUDAKIT_GDS");
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string path(const char* name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

// A device tensor of `n` bytes holding (i * 7 + seed) % 251.
Tensor pattern(std::int64_t n, int seed) {
  std::vector<std::uint8_t> host(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) host[i] = static_cast<std::uint8_t>((i * 7 + seed) % 251);
  Tensor h = from_blob(host.data(), {n}, DType::uint8);
  return h.to(Device::cuda());
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  Tensor h = t.cpu().contiguous();
  auto* p = h.data<std::uint8_t>();
  return std::vector<std::uint8_t>(p, p + h.numel());
}

std::vector<std::uint8_t> file_bytes(const std::string& p, std::uint64_t offset, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  int fd = ::open(p.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_F(Gds, RoundTripAtAlignedAndUnalignedOffsets) {
  ASSERT_TRUE(kEngineEnv);
  gds::File f(path("data.bin"), O_CREAT | O_RDWR);
  EXPECT_TRUE(f.is_registered());
  if (!gds::is_available()) {
    EXPECT_EQ(f.io_path(), gds::IoPath::compat);
    EXPECT_FALSE(f.compat_reason().empty());
  }
  std::uint64_t end = 0;
  int seed = 0;
  for (std::int64_t n : {1, 4095, 4096, 65536 * 3 + 17, 1 << 20}) {
    for (std::uint64_t offset : {0ull, 17ull, 4096ull, 65536ull - 5}) {
      Tensor src = pattern(n, ++seed);
      f.save(src, offset);
      end = std::max<std::uint64_t>(end, offset + static_cast<std::uint64_t>(n));
      EXPECT_EQ(file_bytes(f.path(), offset, static_cast<std::size_t>(n)), bytes_of(src))
          << n << " bytes at " << offset;
      Tensor dst = zeros({n}, device_options(DType::uint8));
      f.load(dst, offset);
      EXPECT_EQ(bytes_of(dst), bytes_of(src)) << n << " bytes at " << offset;
    }
  }
  EXPECT_EQ(f.size(), end);
}

// Where GDS is available (a GDS machine, or the emulated backend with CUDAKIT_EMULATED_GDS=1,
// which ctest runs as cpp.test_gds.emulated_gds) files on O_DIRECT file systems take the gds
// path: cuFile handles, cuFile calls per chunk, cuFile buffer registration.
TEST_F(Gds, GdsPathWhereAvailable) {
  if (!gds::is_available()) GTEST_SKIP() << "no GDS: " << gds::unavailable_reason();
  gds::File f(path("gds.bin"), O_CREAT | O_RDWR);
  if (f.io_path() == gds::IoPath::compat) {
    // Registration was refused for this file system (no O_DIRECT, or cuFile said no).
    EXPECT_NE(f.compat_reason().find("cuFileHandleRegister"), std::string::npos)
        << f.compat_reason();
    GTEST_SKIP() << "this file system takes the compat path: " << f.compat_reason();
  }
  EXPECT_TRUE(f.compat_reason().empty());
  EXPECT_NE(f.handle(), static_cast<std::uintptr_t>(f.fd()));
  Tensor src = pattern(3 * 65536 + 77, 21);
  gds::register_buffer(src);
  f.save(src, 11);
  Tensor dst = zeros({src.numel()}, device_options(DType::uint8));
  f.load(dst, 11);
  EXPECT_EQ(bytes_of(dst), bytes_of(src));
  Stream s;
  Tensor v;
  gds::IoRequest r = f.read_into(dst, 11, s);
  {
    StreamGuard guard(s);
    v = dst + Scalar(0);
  }
  s.sync();
  EXPECT_EQ(r.wait(), src.nbytes());
  EXPECT_EQ(bytes_of(v), bytes_of(src));
  gds::deregister_buffer(src);
  ::setenv("CUDAKIT_GDS", "gds", 1);  // required and available: fine
  gds::File g(path("gds.bin"), O_RDONLY);
  EXPECT_EQ(g.io_path(), gds::IoPath::gds);
}

TEST_F(Gds, RawPointerTransfersAndMultipleTensorsInOneFile) {
  gds::File f(path("two.bin"), O_CREAT | O_RDWR | O_TRUNC);
  Tensor a = pattern(100000, 1), b = pattern(3 * 65536, 2);
  f.save(a, 0);
  f.save(b.data_ptr(), b.nbytes(), a.nbytes());
  Tensor a2 = zeros({100000}, device_options(DType::uint8));
  Tensor b2 = zeros({3 * 65536}, device_options(DType::uint8));
  f.load(b2.data_ptr(), b2.nbytes(), a.nbytes());
  f.load(a2, 0);
  EXPECT_EQ(bytes_of(a2), bytes_of(a));
  EXPECT_EQ(bytes_of(b2), bytes_of(b));
  f.save(a, 0);  // zero-byte and no-op cases
  f.load(a2.data_ptr(), 0, f.size());
}

TEST_F(Gds, MissingDirectoryIsAnIoErrorWithErrnoAndPath) {
  std::string p = path("no/such/dir/x.bin");
  try {
    gds::File f(p, O_CREAT | O_RDWR);
    FAIL() << "opened a file in a missing directory";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_EQ(e.path(), p);
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
}

TEST_F(Gds, ReadPastTheEndNamesTheSizeAndChangesNothing) {
  gds::File f(path("short.bin"), O_CREAT | O_RDWR);
  Tensor src = pattern(5000, 3);
  f.save(src, 0);
  Tensor dst = full({4096}, Scalar(9), device_options(DType::uint8));
  try {
    f.load(dst, 1000);
    FAIL() << "read past the end";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("5096"), std::string::npos) << msg;  // bytes needed
    EXPECT_NE(msg.find("has 5000"), std::string::npos) << msg;
  }
  EXPECT_EQ(bytes_of(dst), std::vector<std::uint8_t>(4096, 9));
  f.load(dst, 904);  // the file is still usable: the last 4096 bytes
  const std::vector<std::uint8_t> all = bytes_of(src);
  EXPECT_EQ(bytes_of(dst), std::vector<std::uint8_t>(all.begin() + 904, all.end()));
}

TEST_F(Gds, OpenFlagsAndBuffersAreChecked) {
  Tensor t = pattern(4096, 4);
  EXPECT_THROW(gds::File(path("a.bin"), O_CREAT | O_RDWR | O_APPEND), ValueError);
  {
    gds::File w(path("w.bin"), O_CREAT | O_WRONLY);
    w.save(t, 0);
    EXPECT_THROW(w.load(t, 0), ValueError);  // opened write-only
  }
  gds::File r(path("w.bin"), O_RDONLY);
  EXPECT_THROW(r.save(t, 0), ValueError);  // opened read-only
  Tensor host = zeros({4096}, TensorOptions{}.with_dtype(DType::uint8));
  EXPECT_THROW(r.load(host, 0), ValueError);
  EXPECT_THROW(r.load(host.data_ptr(), 4096, 0), ValueError);
  Tensor strided = zeros({64, 64}, device_options(DType::uint8)).t();
  EXPECT_THROW(r.load(strided, 0), ValueError);
  EXPECT_THROW(gds::File(dir_, O_RDONLY), ValueError);  // a directory
}

TEST_F(Gds, HandleRegistrationStateIsChecked) {
  gds::File f(path("h.bin"), O_CREAT | O_RDWR);
  Tensor t = pattern(4096, 5);
  EXPECT_NE(f.handle(), 0u);
  EXPECT_THROW(f.register_handle(), Error);  // already registered
  f.deregister_handle();
  EXPECT_EQ(f.handle(), 0u);
  EXPECT_THROW(f.deregister_handle(), Error);
  EXPECT_THROW(f.save(t, 0), Error);
  EXPECT_THROW(f.io_path(), Error);
  f.register_handle();
  f.save(t, 0);
  f.close();
  f.close();  // idempotent
  EXPECT_THROW(f.load(t, 0), Error);
  EXPECT_THROW(f.register_handle(), Error);
}

TEST_F(Gds, PolicyVariable) {
  ::setenv("CUDAKIT_GDS", "compat", 1);
  {
    gds::File f(path("p.bin"), O_CREAT | O_RDWR);
    EXPECT_EQ(f.io_path(), gds::IoPath::compat);
    EXPECT_EQ(f.compat_reason(), "CUDAKIT_GDS=compat");
  }
  ::setenv("CUDAKIT_GDS", "bogus", 1);
  EXPECT_THROW(gds::File(path("p.bin"), O_RDWR), ValueError);
  if (!gds::is_available()) {
    ::setenv("CUDAKIT_GDS", "gds", 1);
    try {
      gds::File f(path("p.bin"), O_RDWR);
      FAIL() << "CUDAKIT_GDS=gds accepted without GDS";
    } catch (const NotSupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(gds::unavailable_reason()), std::string::npos);
    }
  }
  EXPECT_EQ(gds::parse_policy(nullptr), gds::Policy::automatic);
  EXPECT_EQ(gds::parse_policy("auto"), gds::Policy::automatic);
  EXPECT_EQ(gds::parse_policy("gds"), gds::Policy::gds);
}

TEST_F(Gds, StreamOrderedTransfersFollowTheStream) {
  cudakit::testing::HangWatchdog watchdog(60, "stream-ordered GDS transfers");
  gds::File f(path("async.bin"), O_CREAT | O_RDWR);
  Stream s;
  const std::int64_t n = 5 * 65536 + 123;
  Tensor t, u;
  {
    StreamGuard guard(s);  // everything below is ordered on s only
    t = zeros({n}, device_options(DType::uint8));
    u = zeros({n}, device_options(DType::uint8));
    // A slow host task, then the fill: the write must see the fill.
    s.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    t.fill_(Scalar(1));
  }
  gds::IoRequest w = f.write_from(t, 7, s);
  {
    StreamGuard guard(s);
    t.fill_(Scalar(2));  // after the write: must not reach the file
  }
  EXPECT_EQ(w.wait(), static_cast<std::size_t>(n));
  EXPECT_TRUE(w.done());
  EXPECT_EQ(file_bytes(f.path(), 7, static_cast<std::size_t>(n)),
            std::vector<std::uint8_t>(static_cast<std::size_t>(n), 1));
  Tensor v;
  gds::IoRequest r = f.read_into(u, 7, s);
  {
    StreamGuard guard(s);
    v = u + Scalar(3);  // sees the data
  }
  s.sync();
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.wait(), static_cast<std::size_t>(n));
  EXPECT_EQ(bytes_of(v), std::vector<std::uint8_t>(static_cast<std::size_t>(n), 4));
  // Argument errors are raised at the call.
  EXPECT_THROW(f.read_into(u, f.size(), s), ValueError);
}

// A stream-ordered write on the compat path stages its bytes on the stream and returns before
// the stream gets there; a stream-ordered read returns with the data on its way in stream
// order.
TEST_F(Gds, StreamOrderedWriteReturnsAtOnceAndReadOnceDone) {
  cudakit::testing::HangWatchdog watchdog(60, "a staged GDS write");
  gds::File f(path("staged.bin"), O_CREAT | O_RDWR);
  Tensor t = pattern(3 * 65536 + 7, 9);
  synchronize();
  Stream s;
  auto open = std::make_shared<std::atomic<bool>>(false);
  s.launch_host_func([open] {
    while (!open->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread opener([open] {  // a write_from that blocked would still return, late
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    open->store(true);
  });
  gds::IoRequest w = f.write_from(t, 0, s);
  const bool returned_before_the_stream_got_there = !open->load();
  if (f.io_path() == gds::IoPath::compat) {  // the GDS path returns once done
    EXPECT_TRUE(returned_before_the_stream_got_there);
    EXPECT_FALSE(w.done());
  }
  EXPECT_EQ(w.wait(), t.nbytes());
  opener.join();
  EXPECT_EQ(file_bytes(f.path(), 0, t.nbytes()), bytes_of(t));
  Tensor u = zeros({t.numel()}, device_options(DType::uint8));
  synchronize();
  gds::IoRequest r = f.read_into(u, 0, s);
  EXPECT_TRUE(r.done());
  s.sync();
  EXPECT_EQ(bytes_of(u), bytes_of(t));
}

TEST_F(Gds, ClosingDuringATransferLetsItFinish) {
  cudakit::testing::HangWatchdog watchdog(60, "a GDS transfer outliving its file");
  std::string p = path("closing.bin");
  Tensor src = pattern(6 * 65536 + 5, 8);
  Stream s;
  gds::IoRequest req;
  {
    gds::File f(p, O_CREAT | O_RDWR);
    s.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    req = f.write_from(src, 3, s);
    f.close();  // and destroyed: the transfer keeps what it needs
    EXPECT_THROW(f.save(src, 0), Error);
  }
  EXPECT_EQ(req.wait(), src.nbytes());
  EXPECT_EQ(file_bytes(p, 3, src.nbytes()), bytes_of(src));
}

// Transfers on two streams must not wait for each other: a transfer whose stream is held up
// (here by a slow host function) must not occupy the engine's threads (engine.cpp, pop()).
TEST_F(Gds, TransfersOnTwoStreamsDoNotWaitForEachOther) {
  cudakit::testing::HangWatchdog watchdog(120, "GDS transfers on two streams");
  gds::File f(path("two_streams.bin"), O_CREAT | O_RDWR);
  const std::int64_t n = 40 * 65536;  // more chunks than engine threads
  Tensor a = pattern(n, 31), b = pattern(n, 32);
  f.save(b, static_cast<std::uint64_t>(n));
  Stream s1, s2;
  // s2: a slow host task, then a write that waits for it.
  s2.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
  gds::IoRequest w = f.write_from(a, 0, s2);
  // s1: a read whose stream is free at once.
  Tensor c = zeros({n}, device_options(DType::uint8));
  synchronize();
  gds::IoRequest r = f.read_into(c, static_cast<std::uint64_t>(n), s1);
  EXPECT_EQ(r.wait(), static_cast<std::size_t>(n));
  EXPECT_EQ(w.wait(), static_cast<std::size_t>(n));
  s1.sync();
  s2.sync();
  EXPECT_EQ(bytes_of(c), bytes_of(b));
  EXPECT_EQ(file_bytes(f.path(), 0, static_cast<std::size_t>(n)), bytes_of(a));
}

TEST_F(Gds, CaptureIsRefused) {
  gds::File f(path("cap.bin"), O_CREAT | O_RDWR);
  Tensor t = pattern(4096, 6);
  f.save(t, 0);
  Stream s;
  CUDAGraph g;
  StreamGuard guard(s);
  g.capture_begin();
  EXPECT_THROW(f.read_into(t, 0, s), NotSupportedError);
  EXPECT_THROW(f.load(t, 0), NotSupportedError);  // the current stream is capturing
  g.capture_end();
}

TEST_F(Gds, ConcurrentTransfersOnOneFile) {
  gds::File f(path("many.bin"), O_CREAT | O_RDWR);
  constexpr int kThreads = 4;
  constexpr std::int64_t kBytes = 200000;
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Tensor src = pattern(kBytes, 10 + i);
      Tensor dst = zeros({kBytes}, device_options(DType::uint8));
      for (int round = 0; round < 3; ++round) {
        f.save(src, static_cast<std::uint64_t>(i) * kBytes);
        f.load(dst, static_cast<std::uint64_t>(i) * kBytes);
      }
      ok[i] = bytes_of(dst) == bytes_of(src);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(kThreads, 1));
}

TEST_F(Gds, BufferRegistration) {
  Tensor t = pattern(8192, 7);
  EXPECT_FALSE(gds::is_buffer_registered(t));
  gds::register_buffer(t);
  EXPECT_TRUE(gds::is_buffer_registered(t));
  EXPECT_THROW(gds::register_buffer(t), ValueError);  // twice
  gds::File f(path("reg.bin"), O_CREAT | O_RDWR);
  f.save(t, 0);  // registered buffers transfer as any other
  gds::deregister_buffer(t);
  EXPECT_FALSE(gds::is_buffer_registered(t));
  EXPECT_THROW(gds::deregister_buffer(t), ValueError);  // not registered
  EXPECT_THROW(gds::register_buffer(zeros({16}, TensorOptions{})), ValueError);  // host
  EXPECT_THROW(gds::register_buffer(zeros({0}, device_options())), ValueError);  // empty
  // The registry keeps the memory alive: the pointer is not handed out again meanwhile.
  void* p = nullptr;
  {
    Tensor tmp = zeros({1 << 16}, device_options(DType::uint8));
    p = tmp.data_ptr();
    gds::register_buffer(tmp);
  }
  Tensor next = zeros({1 << 16}, device_options(DType::uint8));
  EXPECT_NE(next.data_ptr(), p);
  Tensor view = from_blob(p, {1 << 16}, {1}, DType::uint8, Device::cuda(), false, [] {});
  gds::deregister_buffer(view);
}

TEST(GdsConfig, Parsers) {
  using namespace cudakit::gds::io;
  EXPECT_EQ(parse_bytes("8388608", "V"), 8388608u);
  EXPECT_EQ(parse_bytes("512K", "V"), 512u << 10);
  EXPECT_EQ(parse_bytes("8m", "V"), 8u << 20);
  EXPECT_EQ(parse_bytes("1GiB", "V"), 1u << 30);
  for (const char* bad : {"", "x", "-1", "8Q", "99999999999999999999G"}) {
    try {
      parse_bytes(bad, "CUDAKIT_GDS_CHUNK");
      ADD_FAILURE() << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("CUDAKIT_GDS_CHUNK"), std::string::npos);
    }
  }
  EngineConfig c = parse_engine_config("3", "10000", "never");
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.chunk_bytes, 12288u);  // rounded up to whole blocks
  EXPECT_EQ(c.direct, DirectPolicy::never);
  c = parse_engine_config(nullptr, nullptr, nullptr);
  EXPECT_EQ(c.threads, 8);
  EXPECT_EQ(c.chunk_bytes, 8u << 20);
  EXPECT_EQ(c.direct, DirectPolicy::automatic);
  EXPECT_THROW(parse_engine_config("0", nullptr, nullptr), ValueError);
  EXPECT_THROW(parse_engine_config("4x", nullptr, nullptr), ValueError);
  EXPECT_THROW(parse_engine_config(nullptr, "1K", nullptr), ValueError);
  EXPECT_THROW(parse_engine_config(nullptr, nullptr, "sometimes"), ValueError);
  EXPECT_THROW(gds::parse_policy("GDS"), ValueError);
}
