// Tests of the emulated backend through the driver seam (detail::backend()).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/emulated/config.hpp"
#include "cudakit/error.hpp"
#include "support/emulated_testing.hpp"

namespace ck = cudakit;
namespace cd = cudakit::detail;
using namespace std::chrono_literals;

namespace {

// Small, deterministic devices for this executable (read once when the backend is created).
const bool g_env = [] {
  ::setenv("CUDAKIT_EMULATED_DEVICES", "2", 1);
  ::setenv("CUDAKIT_EMULATED_MEMORY", "1GiB", 1);
  ::setenv("CUDAKIT_EMULATED_CAPABILITY", "9.0", 1);
  return true;
}();

cd::Backend& B() {
  static cd::Backend& b = [] () -> cd::Backend& {
    cd::select_backend("emulated");
    return cd::backend();
  }();
  return b;
}

int code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ck::AcceleratorError& e) {
    return e.code();
  }
  return 0;
}

// RAII helpers so failing assertions do not leak streams/events into later tests.
struct S {
  cd::StreamHandle h;
  explicit S(unsigned flags = cd::kStreamNonBlocking, int device = 0, int prio = 0)
      : h(B().stream_create(device, prio, flags)) {}
  ~S() { B().stream_destroy(h); }
  operator cd::StreamHandle() const { return h; }
};
struct E {
  cd::EventHandle h;
  explicit E(unsigned flags = 0, int device = 0) : h(B().event_create(device, flags)) {}
  ~E() { B().event_destroy(h); }
  operator cd::EventHandle() const { return h; }
};

}  // namespace

TEST(EmulatedConfig, ParsesMemorySizes) {
  using cd::emulated::parse_memory_size;
  EXPECT_EQ(parse_memory_size("1073741824"), 1073741824u);
  EXPECT_EQ(parse_memory_size("512MiB"), 512u << 20);
  EXPECT_EQ(parse_memory_size("2GiB"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size(" 2 gib "), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("1.5GB"), 1500000000u);
  EXPECT_EQ(parse_memory_size("64k"), 65536u);
  EXPECT_EQ(parse_memory_size("100B"), 100u);
  for (const char* bad : {"", "abc", "12XB", "-5GiB", "1.2.3G", "0", "GiB"}) {
    try {
      parse_memory_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ck::ValueError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("CUDAKIT_EMULATED_MEMORY"), std::string::npos) << msg;
      EXPECT_NE(msg.find("e.g."), std::string::npos) << msg;
    }
  }
}

TEST(EmulatedConfig, ParsesConfig) {
  using cd::emulated::parse_config;
  auto c = parse_config(nullptr, nullptr, nullptr);
  EXPECT_EQ(c.devices, 2);
  EXPECT_EQ(c.memory_per_device, std::size_t{8} << 30);
  EXPECT_EQ(c.major, 9);
  EXPECT_EQ(c.minor, 0);
  c = parse_config("4", "256MiB", "8.6");
  EXPECT_EQ(c.devices, 4);
  EXPECT_EQ(c.memory_per_device, 256u << 20);
  EXPECT_EQ(c.major, 8);
  EXPECT_EQ(c.minor, 6);
  EXPECT_THROW(parse_config("two", nullptr, nullptr), ck::ValueError);
  EXPECT_THROW(parse_config("-1", nullptr, nullptr), ck::ValueError);
  EXPECT_THROW(parse_config(nullptr, nullptr, "nine"), ck::ValueError);
  EXPECT_THROW(parse_config(nullptr, nullptr, "9"), ck::ValueError);
}

TEST(EmulatedConfig, ParsesVisibleDevicesAsCuda) {
  using cd::emulated::device_uuid;
  using cd::emulated::parse_visible_devices;
  using V = std::vector<int>;
  EXPECT_EQ(parse_visible_devices(nullptr, 3), (V{0, 1, 2}));  // unset: all
  EXPECT_EQ(parse_visible_devices("", 3), V{});                // empty: none
  EXPECT_EQ(parse_visible_devices("2,0", 3), (V{2, 0}));
  EXPECT_EQ(parse_visible_devices(" 1 ,\t2", 3), (V{1, 2}));
  EXPECT_EQ(parse_visible_devices("+1,2x", 3), (V{1, 2}));     // strtoul-like
  EXPECT_EQ(parse_visible_devices("0,-1,1", 3), V{0});          // negative ends the list
  EXPECT_EQ(parse_visible_devices("-0,1", 3), V{});
  EXPECT_EQ(parse_visible_devices("1,nope,0", 3), V{1});        // not a number ends it
  EXPECT_EQ(parse_visible_devices("1,3,0", 3), V{1});           // out of range ends it
  EXPECT_EQ(parse_visible_devices("99999999999", 3), V{});
  EXPECT_EQ(parse_visible_devices("0,2,0", 3), V{});            // a repeat empties it
  EXPECT_EQ(parse_visible_devices("MIG-abc", 3), V{});
  // UUIDs: "GPU-" + a unique prefix; ambiguous or unknown prefixes end the list.
  const std::string u2 = device_uuid(2), u0 = device_uuid(0);
  EXPECT_EQ(u2.size(), 36u);
  EXPECT_NE(u2, u0);
  EXPECT_EQ(parse_visible_devices(("GPU-" + u2 + ",GPU-" + u0.substr(0, 8)).c_str(), 3), (V{2, 0}));
  EXPECT_EQ(parse_visible_devices(("GPU-" + u2.substr(0, 4)).c_str(), 3), V{2});
  EXPECT_EQ(parse_visible_devices("GPU-", 3), V{});
  EXPECT_EQ(parse_visible_devices(("GPU-" + u2 + ",1").c_str(), 3), V{2});
  EXPECT_EQ(parse_visible_devices(("GPU-" + u2 + ",GPU-" + u2).c_str(), 3), V{});
  // The machine size comes from CUDAKIT_EMULATED_DEVICES; the list applies on top.
  auto c = cd::emulated::parse_config("4", nullptr, nullptr, "3,1");
  EXPECT_EQ(c.devices, 4);
  ASSERT_TRUE(c.visible.has_value());
  EXPECT_EQ(*c.visible, (V{3, 1}));
  EXPECT_FALSE(cd::emulated::parse_config("4", nullptr, nullptr).visible.has_value());
}

TEST(EmulatedBackend, IdentityAndDevices) {
  EXPECT_STREQ(B().name(), "emulated");
  EXPECT_TRUE(cd::is_emulated_backend());
  EXPECT_EQ(B().device_count(), 2);
  EXPECT_EQ(B().driver_version(), 13000);
  EXPECT_EQ(B().unavailable_reason(), "");
  auto i0 = B().device_info(0), i1 = B().device_info(1);
  EXPECT_EQ(i0.name, "cudakit emulated device");
  EXPECT_EQ(i0.total_memory, std::size_t{1} << 30);
  EXPECT_EQ(i0.major, 9);
  EXPECT_EQ(i0.warp_size, 32);
  EXPECT_GT(i0.multi_processor_count, 0);
  EXPECT_NE(i0.uuid, i1.uuid);
  EXPECT_EQ(i0.uuid.size(), 36u);
  auto again = B().device_info(0);
  EXPECT_EQ(i0.uuid, again.uuid);
  EXPECT_EQ(code_of([] { B().device_info(2); }), ck::errc::invalid_device);
  EXPECT_EQ(code_of([] { B().set_current_device(5); }), ck::errc::invalid_device);
  std::thread([] {
    B().set_current_device(1);
    EXPECT_EQ(B().current_device(), 1);
  }).join();
  EXPECT_EQ(B().current_device(), 0);  // per thread
  EXPECT_TRUE(B().can_access_peer(0, 1));
  EXPECT_NO_THROW(B().enable_peer_access(0, 1));
  EXPECT_NO_THROW(B().enable_peer_access(0, 1));
  auto range = B().stream_priority_range();
  EXPECT_EQ(range.first, 0);
  EXPECT_EQ(range.second, -5);
  S s(0, 0, -3);
  EXPECT_EQ(B().stream_priority(s), -3);
  S s2(0, 1, -9);
  EXPECT_EQ(B().stream_priority(s2), -5);  // clamped
  EXPECT_EQ(B().stream_device(s2), 1);
}

TEST(EmulatedBackend, MemoryLimitAndOom) {
  auto info = B().mem_get_info(1);
  EXPECT_EQ(info.total, std::size_t{1} << 30);
  std::size_t used0 = B().device_memory_used(1);
  void* big = B().mem_alloc(1, info.free - (1u << 20));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big) % 256, 0u);
  EXPECT_LT(B().mem_get_info(1).free, std::size_t{1} << 20 + 1);
  EXPECT_EQ(B().mem_alloc(1, 2u << 20), nullptr);  // deterministic OOM → nullptr
  void* small = B().mem_alloc(1, 1000);
  ASSERT_NE(small, nullptr);
  EXPECT_GE(B().device_memory_used(1), used0 + info.free - (1u << 20) + 1000);
  B().mem_free(1, big);
  B().mem_free(1, small);
  EXPECT_EQ(B().mem_get_info(1).free, info.free);
  EXPECT_EQ(B().mem_alloc(0, std::size_t{2} << 30), nullptr);
  EXPECT_EQ(code_of([] { int x; B().mem_free(0, &x); }), ck::errc::invalid_value);
  auto procs = B().gpu_processes(1);
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].pid, ::getpid());
}

TEST(EmulatedBackend, PointerDevice) {
  auto* a = static_cast<char*>(B().mem_alloc(0, 4096));
  auto* b = static_cast<char*>(B().mem_alloc(1, 1000));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(B().pointer_device(a), 0);
  EXPECT_EQ(B().pointer_device(a + 2048), 0);
  EXPECT_EQ(B().pointer_device(a + 4095), 0);
  EXPECT_EQ(B().pointer_device(b + 999), 1);
  int local = 0;
  EXPECT_EQ(B().pointer_device(&local), -1);
  void* pinned = B().host_alloc_pinned(100);
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(B().pointer_device(pinned), -1);
  B().host_free_pinned(pinned);
  B().mem_free(0, a);
  B().mem_free(1, b);
  EXPECT_EQ(B().pointer_device(a + 10), -1);
}

TEST(EmulatedBackend, VirtualMemory) {
  const std::size_t g = B().vm_granularity(0);
  ASSERT_EQ(g, 2u << 20);
  std::size_t used0 = B().device_memory_used(0);
  std::uintptr_t va = B().vm_reserve(0, 4 * g);
  ASSERT_NE(va, 0u);
  EXPECT_EQ(va % g, 0u);
  EXPECT_EQ(B().device_memory_used(0), used0);  // reservations are not accounted
  EXPECT_EQ(B().pointer_device(reinterpret_cast<void*>(va)), -1);
  cd::PhysMemHandle p1 = B().vm_create(0, 2 * g), p2 = B().vm_create(0, g);
  ASSERT_NE(p1, 0u);
  ASSERT_NE(p2, 0u);
  EXPECT_EQ(B().device_memory_used(0), used0 + 3 * g);
  EXPECT_EQ(B().vm_create(0, std::size_t{2} << 30), 0u);  // OOM → 0
  B().vm_map(va, 2 * g, p1, 0);
  B().vm_map(va + 2 * g, g, p2, 0);
  auto* mem = reinterpret_cast<unsigned char*>(va);
  for (std::size_t i = 0; i < 3 * g; i += 4096) mem[i] = static_cast<unsigned char>(i / 4096);
  for (std::size_t i = 0; i < 3 * g; i += 4096) {
    ASSERT_EQ(mem[i], static_cast<unsigned char>(i / 4096));
  }
  EXPECT_EQ(B().pointer_device(mem + 2 * g + 5), 0);
  EXPECT_EQ(B().pointer_device(mem + 3 * g), -1);  // reserved, not mapped
  // Errors: unaligned, double map, outside the reservation.
  EXPECT_EQ(code_of([&] { B().vm_map(va + 4096, g, p2, 0); }), ck::errc::invalid_value);
  EXPECT_EQ(code_of([&] { B().vm_map(va, g, p2, 0); }), ck::errc::invalid_value);
  EXPECT_EQ(code_of([&] { B().vm_map(va + 4 * g, g, p2, 0); }), ck::errc::invalid_value);
  EXPECT_EQ(code_of([&] { B().vm_release(va, 4 * g); }), ck::errc::invalid_value);  // mapped
  // A copy through a stream reads and writes mapped memory.
  std::vector<unsigned char> out(3 * g);
  B().memcpy_async(out.data(), mem, out.size(), nullptr);
  B().stream_synchronize(nullptr);
  EXPECT_EQ(out[2 * g + 4096], mem[2 * g + 4096]);
  // Unmap + remap the same physical memory elsewhere: the data is still there.
  B().vm_unmap(va, 2 * g);
  EXPECT_EQ(B().pointer_device(mem), -1);
  B().vm_map(va + 3 * g, g, p1, 0);
  EXPECT_EQ(mem[3 * g + 4096], 1);
  B().vm_destroy(p1);  // still mapped: memory stays until unmapped
  EXPECT_EQ(B().device_memory_used(0), used0 + 3 * g);
  B().vm_unmap(va + 2 * g, 2 * g);
  EXPECT_EQ(B().device_memory_used(0), used0 + g);
  B().vm_destroy(p2);
  EXPECT_EQ(B().device_memory_used(0), used0);
  B().vm_release(va, 4 * g);
}

TEST(EmulatedBackend, StreamOrderingManyTasks) {
  S s;
  std::vector<int> seen;
  for (int i = 0; i < 2000; ++i) B().launch_host_task(s, [&seen, i] { seen.push_back(i); });
  B().stream_synchronize(s);
  ASSERT_EQ(seen.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(seen[i], i);
  EXPECT_TRUE(B().stream_query(s));
  // Copies and memsets interleave in order with host tasks.
  std::vector<unsigned char> a(1 << 16), b(1 << 16);
  B().memset_d8_async(a.data(), 7, a.size(), s);
  B().memcpy_async(b.data(), a.data(), a.size(), s);
  B().memset_d8_async(a.data(), 9, a.size(), s);
  B().stream_synchronize(s);
  EXPECT_EQ(b[12345], 7);
  EXPECT_EQ(a[12345], 9);
}

TEST(EmulatedBackend, TwoStreamsRunConcurrently) {
  S s1, s2;
  std::atomic<int> arrived{0};
  std::atomic<bool> ok1{false}, ok2{false};
  auto rendezvous = [&](std::atomic<bool>& ok) {
    arrived.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    ok = arrived.load() == 2;  // both tasks were running at the same time
  };
  B().launch_host_task(s1, [&] { rendezvous(ok1); });
  B().launch_host_task(s2, [&] { rendezvous(ok2); });
  B().stream_synchronize(s1);
  B().stream_synchronize(s2);
  EXPECT_TRUE(ok1);
  EXPECT_TRUE(ok2);
}

TEST(EmulatedBackend, EventsRecordQuerySyncElapsed) {
  S s;
  E start, end, no_timing(cd::kEventDisableTiming), never;
  EXPECT_TRUE(B().event_query(never));  // never recorded → complete
  std::promise<void> gate;
  auto fut = gate.get_future().share();
  B().event_record(start, s);
  B().launch_host_task(s, [fut] { fut.wait(); std::this_thread::sleep_for(30ms); });
  B().event_record(end, s);
  B().event_record(no_timing, s);
  EXPECT_FALSE(B().event_query(end));
  EXPECT_EQ(code_of([&] { B().event_elapsed_ms(start, end); }), ck::errc::not_ready);
  EXPECT_EQ(code_of([&] { B().event_elapsed_ms(start, never); }), ck::errc::invalid_handle);
  gate.set_value();
  B().event_synchronize(end);
  EXPECT_TRUE(B().event_query(end));
  EXPECT_TRUE(B().event_query(no_timing) || (B().event_synchronize(no_timing), true));
  float ms = B().event_elapsed_ms(start, end);
  EXPECT_GE(ms, 25.0f);
  EXPECT_LT(ms, 2000.0f);
  EXPECT_LT(B().event_elapsed_ms(end, start), 0.0f);
  EXPECT_EQ(code_of([&] { B().event_elapsed_ms(start, no_timing); }),
            ck::errc::invalid_handle);
  // Re-recording re-arms the event.
  std::promise<void> gate2;
  auto fut2 = gate2.get_future().share();
  B().launch_host_task(s, [fut2] { fut2.wait(); });
  B().event_record(end, s);
  EXPECT_FALSE(B().event_query(end));
  gate2.set_value();
  B().event_synchronize(end);
  EXPECT_TRUE(B().event_query(end));
  // Waiting on a never-recorded event is a no-op.
  B().stream_wait_event(s, never);
  B().stream_synchronize(s);
}

TEST(EmulatedBackend, CrossStreamWaitOrdering) {
  S a, b;
  E e(cd::kEventDisableTiming);
  int value = 0, seen = -1;
  B().launch_host_task(a, [&] { std::this_thread::sleep_for(50ms); value = 42; });
  B().event_record(e, a);
  B().stream_wait_event(b, e);
  B().launch_host_task(b, [&] { seen = value; });
  B().stream_synchronize(b);
  EXPECT_EQ(seen, 42);
}

TEST(EmulatedBackend, StickyTaskErrors) {
  S s;
  std::atomic<bool> later_ran{false};
  B().launch_host_task(s, [] { throw std::runtime_error("boom in task"); });
  B().launch_host_task(s, [&] { later_ran = true; });
  try {
    B().stream_synchronize(s);
    ADD_FAILURE() << "no error reported";
  } catch (const ck::AcceleratorError& e) {
    EXPECT_EQ(e.code(), 719);
    EXPECT_NE(std::string(e.what()).find("boom in task"), std::string::npos);
  }
  EXPECT_TRUE(later_ran);  // the worker survived
  EXPECT_EQ(code_of([&] { B().stream_query(s); }), 719);  // sticky
  EXPECT_EQ(code_of([&] { B().stream_synchronize(s); }), 719);
  EXPECT_EQ(code_of([] { B().device_synchronize(0); }), 719);  // reported once per stream
  EXPECT_EQ(code_of([] { B().device_synchronize(0); }), 0);
}

TEST(EmulatedBackend, CaptureAndReplayTwice) {
  S s;
  std::vector<int> src(1024), dst(1024, 0);
  for (int i = 0; i < 1024; ++i) src[i] = i;
  int runs = 0;
  long sum = 0;
  B().stream_begin_capture(s, cd::CaptureMode::global);
  std::uint64_t id = 0;
  EXPECT_EQ(B().stream_capture_status(s, &id), cd::CaptureStatus::active);
  EXPECT_NE(id, 0u);
  B().memcpy_async(dst.data(), src.data(), src.size() * sizeof(int), s);
  B().launch_host_task(s, [&] {
    ++runs;
    for (int v : dst) sum += v;
  });
  cd::GraphHandle g = B().stream_end_capture(s);
  EXPECT_EQ(B().stream_capture_status(s, nullptr), cd::CaptureStatus::none);
  B().stream_synchronize(s);
  EXPECT_EQ(runs, 0);  // captured, not executed
  EXPECT_EQ(dst[5], 0);
  auto nodes = B().graph_nodes(g);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].type, cd::GraphNodeType::memcpy);
  EXPECT_EQ(nodes[1].type, cd::GraphNodeType::host);
  auto edges = B().graph_edges(g);
  ASSERT_EQ(edges.size(), 1u);
  EXPECT_EQ(edges[0].from, nodes[0].id);
  EXPECT_EQ(edges[0].to, nodes[1].id);
  cd::GraphExecHandle x = B().graph_instantiate(g);
  B().graph_launch(x, s);
  B().stream_synchronize(s);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(sum, 1023L * 1024 / 2);
  for (int& v : src) v *= 2;  // replay reads the buffers at replay time
  B().graph_launch(x, s);
  B().stream_synchronize(s);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(sum, 3 * (1023L * 1024 / 2));
  EXPECT_EQ(dst[100], 200);
  std::string path = ::testing::TempDir() + "emu_graph.dot";
  B().graph_debug_dot_print(g, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("digraph"), std::string::npos);
  EXPECT_NE(text.str().find("n0 -> n1"), std::string::npos);
  B().graph_exec_destroy(x);
  B().graph_destroy(g);
}

TEST(EmulatedBackend, ForkJoinCapture) {
  S s1, s2;
  E fork(cd::kEventDisableTiming), join(cd::kEventDisableTiming);
  std::vector<std::string> log;
  std::mutex mu;
  auto note = [&](const char* what) {
    return [&, what] {
      std::lock_guard lk(mu);
      log.push_back(what);
    };
  };
  B().stream_begin_capture(s1, cd::CaptureMode::thread_local_);
  B().launch_host_task(s1, note("A"));
  B().event_record(fork, s1);
  B().stream_wait_event(s2, fork);  // s2 joins the capture
  std::uint64_t id1 = 0, id2 = 0;
  EXPECT_EQ(B().stream_capture_status(s1, &id1), cd::CaptureStatus::active);
  EXPECT_EQ(B().stream_capture_status(s2, &id2), cd::CaptureStatus::active);
  EXPECT_EQ(id1, id2);
  B().launch_host_task(s2, note("B"));
  B().launch_host_task(s1, note("C"));
  B().event_record(join, s2);
  B().stream_wait_event(s1, join);
  B().launch_host_task(s1, note("D"));
  cd::GraphHandle g = B().stream_end_capture(s1);
  EXPECT_EQ(B().stream_capture_status(s2, nullptr), cd::CaptureStatus::none);
  auto nodes = B().graph_nodes(g);
  ASSERT_EQ(nodes.size(), 4u);  // A, B, C, D (event records/joins make no nodes)
  std::set<std::pair<std::uint64_t, std::uint64_t>> edges;
  for (auto e : B().graph_edges(g)) edges.insert({e.from, e.to});
  // Node ids in capture order: A=0, B=1, C=2, D=3.
  std::set<std::pair<std::uint64_t, std::uint64_t>> expected{{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  EXPECT_EQ(edges, expected);
  EXPECT_TRUE(log.empty());
  auto x = B().graph_instantiate(g);
  B().graph_launch(x, s2);
  B().stream_synchronize(s2);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log.front(), "A");
  EXPECT_EQ(log.back(), "D");
  // s2 works normally again after the capture.
  B().launch_host_task(s2, note("E"));
  B().stream_synchronize(s2);
  EXPECT_EQ(log.back(), "E");
  // An event recorded in the capture cannot be queried afterwards (as CUDA).
  EXPECT_EQ(code_of([&] { B().event_query(fork); }), 907);
  B().graph_exec_destroy(x);
  B().graph_destroy(g);
}

TEST(EmulatedBackend, UnjoinedCaptureFails) {
  S s1, s2;
  E fork(cd::kEventDisableTiming);
  B().stream_begin_capture(s1, cd::CaptureMode::global);
  B().launch_host_task(s1, [] {});
  B().event_record(fork, s1);
  B().stream_wait_event(s2, fork);
  B().launch_host_task(s2, [] {});  // never joined back
  EXPECT_EQ(code_of([&] { B().stream_end_capture(s1); }), ck::errc::stream_capture_unjoined);
  EXPECT_EQ(B().stream_capture_status(s1, nullptr), cd::CaptureStatus::none);
  EXPECT_EQ(B().stream_capture_status(s2, nullptr), cd::CaptureStatus::none);
  // Ending on the non-origin stream is "unmatched".
  B().stream_begin_capture(s1, cd::CaptureMode::global);
  B().event_record(fork, s1);
  B().stream_wait_event(s2, fork);
  EXPECT_EQ(code_of([&] { B().stream_end_capture(s2); }), ck::errc::stream_capture_unmatched);
  EXPECT_EQ(code_of([&] { B().stream_end_capture(s1); }), ck::errc::stream_capture_invalidated);
}

TEST(EmulatedBackend, SyncInvalidatesCapture) {
  S s;
  B().stream_begin_capture(s, cd::CaptureMode::global);
  EXPECT_EQ(code_of([&] { B().stream_synchronize(s); }), ck::errc::stream_capture_unsupported);
  EXPECT_EQ(B().stream_capture_status(s, nullptr), cd::CaptureStatus::invalidated);
  EXPECT_EQ(code_of([&] { B().launch_host_task(s, [] {}); }),
            ck::errc::stream_capture_invalidated);
  EXPECT_EQ(code_of([&] { B().stream_end_capture(s); }), ck::errc::stream_capture_invalidated);
  EXPECT_EQ(B().stream_capture_status(s, nullptr), cd::CaptureStatus::none);

  B().stream_begin_capture(s, cd::CaptureMode::global);
  EXPECT_EQ(code_of([&] { B().stream_query(s); }), ck::errc::stream_capture_unsupported);
  EXPECT_EQ(code_of([&] { B().stream_end_capture(s); }), ck::errc::stream_capture_invalidated);

  // A blocking stream capturing + the legacy default stream → implicit-sync error.
  S blocking(0);
  B().stream_begin_capture(blocking, cd::CaptureMode::global);
  EXPECT_EQ(code_of([] { B().stream_synchronize(nullptr); }), ck::errc::stream_capture_implicit);
  EXPECT_EQ(code_of([&] { B().stream_end_capture(blocking); }),
            ck::errc::stream_capture_invalidated);

  // A non-blocking capture does not care about the legacy stream.
  B().stream_begin_capture(s, cd::CaptureMode::global);
  B().launch_host_task(nullptr, [] {});
  B().stream_synchronize(nullptr);
  cd::GraphHandle g = B().stream_end_capture(s);
  EXPECT_TRUE(B().graph_nodes(g).empty());
  B().graph_destroy(g);
  B().stream_synchronize(s);
}

TEST(EmulatedBackend, LegacyDefaultStreamOrdering) {
  S blocking(0), nonblocking(cd::kStreamNonBlocking);
  std::atomic<int> x{0}, seen{-1};
  // legacy waits for prior blocking-stream work
  B().launch_host_task(blocking, [&] { std::this_thread::sleep_for(40ms); x = 1; });
  B().launch_host_task(nullptr, [&] { seen = x.load(); });
  B().stream_synchronize(nullptr);
  EXPECT_EQ(seen, 1);
  // blocking stream waits for prior legacy work
  B().launch_host_task(nullptr, [&] { std::this_thread::sleep_for(40ms); x = 2; });
  B().launch_host_task(blocking, [&] { seen = x.load(); });
  B().stream_synchronize(blocking);
  EXPECT_EQ(seen, 2);
  // legacy sync covers blocking-stream work enqueued before it
  B().launch_host_task(blocking, [&] { std::this_thread::sleep_for(30ms); x = 3; });
  B().stream_synchronize(nullptr);
  EXPECT_EQ(x, 3);
  // non-blocking streams are independent of a stalled legacy stream
  std::promise<void> gate;
  auto fut = gate.get_future().share();
  B().launch_host_task(nullptr, [fut] { fut.wait(); });
  std::atomic<bool> nb_ran{false};
  B().launch_host_task(nonblocking, [&] { nb_ran = true; });
  B().stream_synchronize(nonblocking);
  EXPECT_TRUE(nb_ran);
  EXPECT_FALSE(B().stream_query(nullptr));
  gate.set_value();
  B().stream_synchronize(nullptr);
  EXPECT_TRUE(B().stream_query(nullptr));
}

TEST(EmulatedBackend, StreamOrderedAllocation) {
  S s;
  std::size_t used0 = B().device_memory_used(0);
  void* p = B().mem_alloc_async(0, 1 << 20, s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(B().pointer_device(p), 0);
  std::promise<void> gate;
  auto fut = gate.get_future().share();
  B().launch_host_task(s, [fut] { fut.wait(); });
  B().mem_free_async(p, s);
  EXPECT_EQ(B().device_memory_used(0), used0 + (1 << 20));  // free not reached yet
  gate.set_value();
  B().stream_synchronize(s);
  EXPECT_EQ(B().device_memory_used(0), used0);
}

TEST(EmulatedBackend, DestroyStreamWithPendingWork) {
  std::atomic<bool> done{false};
  auto h = B().stream_create(0, 0, cd::kStreamNonBlocking);
  B().launch_host_task(h, [&] { std::this_thread::sleep_for(30ms); done = true; });
  B().stream_destroy(h);  // returns at once; work still finishes
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!done && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(done);
  B().device_synchronize(0);
}

// The telemetry model (telemetry.cpp): utilization and memory_usage measured, the sensors
// derived from utilization, every call answering.
TEST(EmulatedBackend, Telemetry) {
  EXPECT_FALSE(B().capabilities().hardware_telemetry);
  S s;
  std::promise<void> gate;
  auto fut = gate.get_future().share();
  std::promise<void> started;
  auto running = started.get_future();
  B().launch_host_task(s, [fut, &started] {
    started.set_value();
    fut.wait();
  });
  running.wait();  // the window must start after the task does (slow under sanitizers)
  std::this_thread::sleep_for(200ms);
  EXPECT_GE(B().utilization_percent(1), 0);
  EXPECT_GE(B().utilization_percent(0), 90);  // a task has been running the whole window
  // Busy: hot, drawing power, boosted; no copy ran, so the memory controller is idle.
  EXPECT_GE(B().temperature_c(0), 70);
  EXPECT_LE(B().temperature_c(0), 75);
  EXPECT_GE(B().power_draw_mw(0), 600'000);
  EXPECT_EQ(B().clock_rate_mhz(0), B().device_info(0).clock_rate / 1000);
  EXPECT_EQ(B().memory_utilization_percent(0), 0);
  gate.set_value();
  B().stream_synchronize(s);
  std::this_thread::sleep_for(120ms);
  EXPECT_EQ(B().utilization_percent(0), 0);
  EXPECT_EQ(B().temperature_c(0), 30);
  EXPECT_EQ(B().power_draw_mw(0), 70'000);
  EXPECT_EQ(B().clock_rate_mhz(0), 345);
  EXPECT_EQ(B().memory_utilization_percent(0), 0);

  // Copies count as memory-controller load: right after they finish, the window holds them.
  const std::size_t n = std::size_t{64} << 20;
  void* a = B().mem_alloc(0, n);
  void* b = B().mem_alloc(0, n);
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 4; ++i) B().memcpy_async(a, b, n, s);
  B().stream_synchronize(s);
  int mem = B().memory_utilization_percent(0);
  EXPECT_GT(mem, 0);
  EXPECT_LE(mem, 100);
  B().mem_free(0, a);
  B().mem_free(0, b);
  EXPECT_THROW(B().temperature_c(7), ck::AcceleratorError);  // still validates the device
}

TEST(EmulatedBackend, KernelsNotSupported) {
  try {
    B().module_load_data(0, "ptx");
    ADD_FAILURE();
  } catch (const ck::NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda backend"), std::string::npos);
  }
}

TEST(EmulatedBackend, IpcInProcess) {
  E ev(cd::kEventInterprocess | cd::kEventDisableTiming);
  cd::IpcHandle h = B().event_ipc_handle(ev);
  cd::EventHandle opened = B().event_open_ipc(h);
  S s;
  B().event_record(ev, s);
  B().event_synchronize(opened);
  EXPECT_TRUE(B().event_query(opened));
  B().event_destroy(opened);
  E plain;
  EXPECT_EQ(code_of([&] { B().event_ipc_handle(plain); }), ck::errc::invalid_value);
  void* p = B().mem_alloc(0, 4096);
  cd::IpcHandle mh = B().mem_ipc_handle(static_cast<char*>(p) + 100);
  // As CUDA: a memory handle cannot be opened in the process that exported it.
  EXPECT_EQ(code_of([&] { B().mem_open_ipc(mh); }), ck::errc::invalid_context);
  EXPECT_EQ(code_of([&] { B().mem_close_ipc(p); }), ck::errc::invalid_value);
  // A handle from another process cannot be opened here.
  cd::IpcHandle foreign = mh;
  int other_pid = ::getpid() + 1;
  std::memcpy(foreign.bytes + 12, &other_pid, sizeof other_pid);
  try {
    B().mem_open_ipc(foreign);
    ADD_FAILURE();
  } catch (const ck::AcceleratorError& e) {
    EXPECT_EQ(e.code(), ck::errc::not_supported);
    EXPECT_NE(std::string(e.what()).find("process"), std::string::npos);
  }
  B().mem_free(0, p);
}
