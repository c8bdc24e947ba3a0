// What a C++ inference engine needs from cudakit (issue 30): raw-pointer copies and fills on
// streams (captured into graphs too), the capability query, stream priorities that are
// checked, the error texts of a bad device index and of an impossible allocation,
// dump_snapshot(), annotation values of any integer type, demangled kernel names in graph data
// and CUDAGraph::update. Public API as an engine uses it; runs on both backends.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cudakit/cudakit.hpp"
#include "graphs_test_util.hpp"
#include "support/emulated_testing.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;

namespace {

template <class E, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// Device memory from the caching allocator, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n, int device = kCurrentDevice)
      : bytes(n), ptr(caching_allocator_alloc(n, device)) {}
  ~DeviceBuffer() { caching_allocator_delete(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::size_t bytes;
  void* ptr;
};

std::vector<unsigned char> read_back(const void* device_ptr, std::size_t n, StreamRef s) {
  std::vector<unsigned char> host(n);
  memcpy_async(host.data(), device_ptr, n, s);
  s.sync();
  return host;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "cudakit_engine_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

// ---- capabilities ----

TEST(EngineApi, BackendCapabilitiesAreTheBackendsOwn) {
  const BackendCapabilities c = backend_capabilities();
  EXPECT_EQ(c.backend, backend_name());
  const detail::BackendCapabilities seam = detail::backend().capabilities();
  EXPECT_EQ(c.runs_kernels, seam.runs_kernels);
  EXPECT_EQ(c.host_addressable_device_memory, seam.host_addressable_device_memory);
  EXPECT_EQ(c.vendor_math_handles, seam.vendor_math_handles);
  EXPECT_EQ(c.cross_process_ipc, seam.cross_process_ipc);
  EXPECT_EQ(c.hardware_telemetry, seam.hardware_telemetry);
  EXPECT_EQ(c.graph_tools_ids, graph_annotations::is_available() || !is_available());
  if (detail::is_emulated_backend()) {  // the emulator's documented profile
    EXPECT_FALSE(c.runs_kernels);
    EXPECT_TRUE(c.host_addressable_device_memory);
    EXPECT_TRUE(c.graph_tools_ids);
  }
}

// ---- raw copies and fills ----

TEST(EngineApi, MemsetAndMemcpyOnAStream) {
  REQUIRE_DEVICE();
  Stream s(0);
  DeviceBuffer a(4096), b(4096);
  memset_async(a.ptr, 0x5A, a.bytes, s);
  memcpy_async(b.ptr, a.ptr, 1024, s);            // device to device
  memset_async(static_cast<char*>(b.ptr) + 1024, -1, 1024, s);  // -1 is the byte 0xFF
  memset_async(static_cast<char*>(b.ptr) + 2048, 0, 2048, s);
  std::vector<unsigned char> host = read_back(b.ptr, b.bytes, s);
  for (std::size_t i = 0; i < 1024; ++i) ASSERT_EQ(host[i], 0x5A) << i;
  for (std::size_t i = 1024; i < 2048; ++i) ASSERT_EQ(host[i], 0xFF) << i;
  for (std::size_t i = 2048; i < 4096; ++i) ASSERT_EQ(host[i], 0) << i;
  // Host to device, on the current stream (the overloads without a stream).
  std::vector<unsigned char> pattern(256);
  for (int i = 0; i < 256; ++i) pattern[i] = static_cast<unsigned char>(i);
  {
    StreamGuard g(s);
    memcpy_async(a.ptr, pattern.data(), pattern.size());
    memset_async(static_cast<char*>(a.ptr) + 256, 7, 16);
  }
  host = read_back(a.ptr, 512, s);
  EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), host.begin()));
  EXPECT_EQ(host[256], 7);
  EXPECT_EQ(host[271], 7);
  EXPECT_EQ(host[272], 0x5A);
}

TEST(EngineApi, RawCopiesRejectBadArguments) {
  REQUIRE_DEVICE();
  Stream s(0);
  DeviceBuffer a(64);
  EXPECT_NE(message_of<ValueError>([&] { memcpy_async(nullptr, a.ptr, 8, s); }).find("dst is a null"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { memcpy_async(a.ptr, nullptr, 8, s); }).find("src is a null"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { memset_async(a.ptr, 256, 8, s); }).find("-128..255"),
            std::string::npos);
  memcpy_async(nullptr, nullptr, 0, s);  // nothing to copy: fine, as cudaMemcpyAsync
  memset_async(nullptr, 0, 0, s);
  s.sync();
}

TEST(EngineApi, PeerCopyChecksTheDevices) {
  REQUIRE_DEVICE();
  Stream s(0);
  DeviceBuffer a(256, 0);
  std::vector<unsigned char> host(256, 1);
  const std::string m = message_of<ValueError>(
      [&] { memcpy_peer_async(a.ptr, 0, host.data(), 0, 256, s); });
  EXPECT_NE(m.find("src is host memory, not device 0"), std::string::npos) << m;
  if (device_count() < 2) GTEST_SKIP() << "peer copies need 2 devices";
  DeviceBuffer b(256, 1);
  memset_async(a.ptr, 0x11, 256, s);
  memcpy_peer_async(b.ptr, 1, a.ptr, 0, 256, s);
  const std::vector<unsigned char> out = read_back(b.ptr, 256, s);
  EXPECT_EQ(out, std::vector<unsigned char>(256, 0x11));
  const std::string wrong = message_of<ValueError>(
      [&] { memcpy_peer_async(b.ptr, 0, a.ptr, 0, 256, s); });
  EXPECT_NE(wrong.find("dst is device 1, not device 0"), std::string::npos) << wrong;
}

TEST(EngineApi, RawCopiesAreCapturedIntoGraphs) {
  REQUIRE_DEVICE();
  DeviceBuffer src(512), dst(512);
  Stream s(0);
  memset_async(src.ptr, 3, 512, s);
  memset_async(dst.ptr, 0, 512, s);
  s.sync();
  CUDAGraph g;
  capture(g, [&] {
    memcpy_async(dst.ptr, src.ptr, 256, current_stream());
    memset_async(static_cast<char*>(dst.ptr) + 256, 9, 256, current_stream());
  });
  EXPECT_EQ(read_back(dst.ptr, 512, s), std::vector<unsigned char>(512, 0));  // not run yet
  g.replay();
  synchronize();
  const std::vector<unsigned char> out = read_back(dst.ptr, 512, s);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[255], 3);
  EXPECT_EQ(out[256], 9);
  EXPECT_EQ(out[511], 9);
}

// ---- stream priorities and error texts ----

TEST(EngineApi, OwnedStreamsRefusePrioritiesOutsideTheRange) {
  REQUIRE_DEVICE();
  const auto [least, greatest] = stream_priority_range(0);
  EXPECT_GE(least, greatest);  // numerically lower is higher priority
  Stream hi(0, greatest), lo(0, least);
  EXPECT_EQ(hi.priority(), greatest);
  EXPECT_EQ(lo.priority(), least);
  const std::string range = std::to_string(greatest) + " (highest) .. " + std::to_string(least);
  const std::string m = message_of<ValueError>([&] { Stream s(0, -100); });
  EXPECT_NE(m.find("priority -100"), std::string::npos) << m;
  EXPECT_NE(m.find(range), std::string::npos) << m;
  EXPECT_NE(message_of<ValueError>([&] { Stream s(0, least + 1); }).find(range),
            std::string::npos);
  // The pool keeps torch's getStreamFromPool semantics: more urgent than the highest is the
  // highest; less urgent than the lowest does not exist and is refused, naming the range.
  EXPECT_EQ(stream_from_pool(0, greatest).priority(), greatest);
  EXPECT_EQ(stream_from_pool(0, -100).priority(), greatest);
  EXPECT_EQ(stream_from_pool(0, least).priority(), least);
  const std::string p = message_of<ValueError>([&] { stream_from_pool(0, least + 7); });
  EXPECT_NE(p.find("priority " + std::to_string(least + 7) + " is lower than the lowest"),
            std::string::npos) << p;
  EXPECT_NE(p.find(range), std::string::npos) << p;
}

TEST(EngineApi, BadDeviceIndexNamesTheValidRange) {
  REQUIRE_DEVICE();
  const std::string m = message_of<ValueError>([] { Stream s(99); });
  EXPECT_NE(m.find("valid indices are 0.." + std::to_string(device_count() - 1)), std::string::npos)
      << m;
  EXPECT_EQ(m.find("at most 64"), std::string::npos) << m;
}

TEST(EngineApi, ImpossibleAllocationReportsTheDevicesRealFreeMemory) {
  REQUIRE_DEVICE();
  const auto [free_before, total] = mem_get_info(0);
  ASSERT_GT(free_before, 0u);
  try {
    Tensor t = empty({std::int64_t{1} << 61}, device_options(DType::float32, 0));
    FAIL() << "a 2**63-byte tensor was allocated";
  } catch (const OutOfMemoryError& e) {
    EXPECT_GT(e.free_bytes(), 0u);
    EXPECT_EQ(e.total_bytes(), total);
    EXPECT_EQ(e.device(), 0);
  }
}

// ---- snapshots ----

TEST(EngineApi, DumpSnapshotWritesTheJsonSnapshot) {
  REQUIRE_DEVICE();
  DeviceBuffer keep(1 << 20);
  const std::string path = temp_path("snapshot.json");
  dump_snapshot(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), memory_snapshot_json()) << "the file is the JSON snapshot";
  EXPECT_NE(text.str().find("\"segments\""), std::string::npos);
  std::remove(path.c_str());
  EXPECT_NE(message_of<ValueError>([] { dump_snapshot("s.pickle"); }).find("name the file .json"),
            std::string::npos);
  const std::string bad = message_of<IoError>([] { dump_snapshot("/nonexistent-dir/s.json"); });
  EXPECT_NE(bad.find("/nonexistent-dir/s.json"), std::string::npos) << bad;
}

// ---- annotations and graph data ----

TEST(EngineApi, AnnotationValuesOfEveryIntegerType) {
  const std::size_t layer = 3;
  const unsigned heads = 8;
  const std::uint64_t tokens = 1ull << 40;
  graph_annotations::Annotation a{{"layer", layer}, {"heads", heads}, {"tokens", tokens},
                                  {"name", "attention"}, {"scale", 0.5f}};
  EXPECT_EQ(std::get<std::int64_t>(a[0].second), 3);
  EXPECT_EQ(std::get<std::int64_t>(a[1].second), 8);
  EXPECT_EQ(std::get<std::int64_t>(a[2].second), std::int64_t{1} << 40);
  EXPECT_EQ(std::get<std::string>(a[3].second), "attention");
  EXPECT_EQ(std::get<double>(a[4].second), 0.5);
  const std::string m = message_of<ValueError>(
      [] { graph_annotations::AnnotationValue v(~std::uint64_t{0}); });
  EXPECT_NE(m.find("18446744073709551615"), std::string::npos) << m;
}

TEST(EngineApi, GraphDataDemanglesKernelNames) {
  REQUIRE_DEVICE();
  if (!graph_annotations::is_available()) GTEST_SKIP() << "no graph tools ids";
  if (!detail::is_emulated_backend()) GTEST_SKIP() << "names a kernel through the emulator";
  // A kernel node with the mangled name nvcc gives `void decode(float*, int)`.
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [] {
    detail::backend().launch_host_kernel(current_stream().handle(), "_Z6decodePfi", [] {});
    detail::backend().launch_host_kernel(current_stream().handle(), "plain_c_kernel", [] {});
  });
  g.instantiate();
  std::vector<std::string> names;
  const std::shared_ptr<const GraphData> data = g.get_graph_data();
  for (const auto& n : data->nodes) {
    if (n.kernel_name) names.push_back(*n.kernel_name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"decode(float*, int)", "plain_c_kernel"}));
}

// ---- CUDAGraph::update ----

TEST(EngineApi, UpdateTakesTheNewCapturesParameters) {
  REQUIRE_DEVICE();
  Tensor a = full({16}, Scalar(1.0), device_options());
  Tensor b = full({16}, Scalar(5.0), device_options());
  Tensor ya, yb;
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] { ya = a * 2.0 + 1.0; });
  g.replay();
  const auto exec_id = g.exec_graph_id();
  CUDAGraph next(/*keep_graph=*/true);
  capture(next, [&] { yb = b * 2.0 + 1.0; });  // same work, other buffers
  g.update(next);
  EXPECT_EQ(g.exec_graph_id(), exec_id) << "update keeps the exec graph";
  g.replay();
  synchronize();
  EXPECT_EQ(values(yb), std::vector<double>(16, 11.0));
  EXPECT_EQ(values(ya), std::vector<double>(16, 3.0));  // no longer written
  // The new capture's pool lives on in g: `next` can go.
  const std::vector<MempoolId> pools = g.pools();
  EXPECT_NE(std::find(pools.begin(), pools.end(), next.pool()), pools.end());
}

TEST(EngineApi, UpdateRefusesOtherWork) {
  REQUIRE_DEVICE();
  Tensor a = full({16}, Scalar(1.0), device_options());
  Tensor y, z;
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] { y = a * 2.0; });
  g.instantiate();
  const std::size_t pools_before = g.pools().size();
  CUDAGraph other(/*keep_graph=*/true);
  capture(other, [&] { z = (a * 2.0 + 1.0) * 3.0; });  // more nodes
  const std::string m = message_of<ValueError>([&] { g.update(other); });
  EXPECT_NE(m.find("topology"), std::string::npos) << m;
  EXPECT_EQ(g.pools().size(), pools_before) << "a refused update retains no pool";
  g.replay();  // unchanged and usable
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(16, 2.0));

  CUDAGraph dropped;  // keep_graph=false: no template to take parameters from
  capture(dropped, [&] { z = a * 3.0; });
  EXPECT_NE(message_of<Error>([&] { g.update(dropped); }).find("keep_graph=true"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { g.update(g); }).find("from itself"), std::string::npos);
  CUDAGraph never(/*keep_graph=*/true);
  EXPECT_NE(message_of<Error>([&] { never.update(other); }).find("not instantiated"),
            std::string::npos);
  CUDAGraph random(/*keep_graph=*/true);
  Tensor r;
  capture(random, [&] { r = randn({16}, device_options()); });
  CUDAGraph random2(/*keep_graph=*/true);
  capture(random2, [&] { r = randn({16}, device_options()); });
  random.instantiate();
  EXPECT_NE(message_of<ValueError>([&] { random.update(random2); }).find("random numbers"),
            std::string::npos);
}
