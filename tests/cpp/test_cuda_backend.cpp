// Tests of the `cuda` backend (src/backend/cuda) through the driver seam.
//
// The backend is selected explicitly (ctest runs everything with CUDAKIT_BACKEND=emulated;
// select_backend before first use wins). Without a driver / GPU only the "unavailable" tests
// run; the others skip. The GPU tests exercise the real driver: run them on a CUDA machine.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"

namespace {

using namespace cudakit;
using namespace cudakit::detail;

Backend& cuda() {
  static Backend* b = [] {
    select_backend("cuda");
    return &backend();
  }();
  return *b;
}

// Builds without the CUDA headers have no cuda backend at all (make_cuda_backend throws).
class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef CUDAKIT_WITH_CUDA
    GTEST_SKIP() << "cudakit was built without the CUDA headers: no cuda backend";
#endif
  }
};
class CudaBackendGpu : public CudaBackend {};

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    if (cuda().device_count() == 0) {                                          \
      GTEST_SKIP() << "no CUDA device: " << cuda().unavailable_reason();      \
    }                                                                          \
  } while (0)

// A trivial kernel, as PTX (nvcc -ptx -arch=compute_75 of the source below; the ISA version is
// lowered to 7.0, which these instructions need at most, so any CUDA 11+ driver can JIT it):
//   extern "C" __global__ void cudakit_test_fill(unsigned* p, unsigned v, unsigned n)
//   { unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = v + i; } )
constexpr const char* kFillPtx = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry cudakit_test_fill(
	.param .u64 cudakit_test_fill_param_0,
	.param .u32 cudakit_test_fill_param_1,
	.param .u32 cudakit_test_fill_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [cudakit_test_fill_param_0];
	ld.param.u32 	%r2, [cudakit_test_fill_param_1];
	ld.param.u32 	%r3, [cudakit_test_fill_param_2];
	mov.u32 	%r4, %ctaid.x;
	mov.u32 	%r5, %ntid.x;
	mov.u32 	%r6, %tid.x;
	mad.lo.s32 	%r1, %r4, %r5, %r6;
	setp.ge.u32 	%p1, %r1, %r3;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	add.s32 	%r7, %r1, %r2;
	st.global.u32 	[%rd4], %r7;

$L__BB0_2:
	ret;
}
)";

// ---------------------------------------------------------------- availability (any machine)

// Declared first so it runs before anything touches the driver in this process.
TEST_F(CudaBackend, CreatingTheBackendDoesNotLoadTheDriver) {
  Backend& b = cuda();
  EXPECT_STREQ(b.name(), "cuda");
  EXPECT_EQ(selected_backend_name(), "cuda");
  // name() needs no driver; libcuda must not have been loaded by creation (fork safety).
  void* loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(loaded, nullptr) << "libcuda.so.1 was loaded before the first device call";
  if (loaded) dlclose(loaded);
}

TEST_F(CudaBackend, ReportsAvailabilityConsistently) {
  Backend& b = cuda();
  int n = b.device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(b.unavailable_reason().empty());
  } else {
    EXPECT_EQ(b.unavailable_reason(), "");
    EXPECT_GE(b.driver_version(), 12080);
  }
  EXPECT_EQ(b.device_count(), n);  // stable
}

TEST_F(CudaBackend, NoDriverIsExplainedAndDeviceCallsThrow) {
  Backend& b = cuda();
  if (b.device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string reason = b.unavailable_reason();
  ASSERT_FALSE(reason.empty());

  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    // This machine has no driver at all: the reason says exactly that.
    EXPECT_EQ(reason.rfind("libcuda.so.1 not found: no NVIDIA driver on this machine", 0), 0u)
        << reason;
    EXPECT_EQ(b.driver_version(), 0);
  } else {
    dlclose(lib);
  }

  auto expect_unavailable = [&](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw";
    } catch (const AcceleratorError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(reason), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_NE(msg.find("CUDAKIT_BACKEND=emulated"), std::string::npos) << msg;
      EXPECT_NE(e.code(), 0);
      EXPECT_FALSE(e.code_name().empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " threw a non-AcceleratorError: " << e.what();
    }
  };
  expect_unavailable([&] { b.set_current_device(0); }, "set_current_device");
  expect_unavailable([&] { b.mem_alloc(0, 1024); }, "mem_alloc");
  expect_unavailable([&] { b.host_alloc_pinned(1024); }, "host_alloc_pinned");
  expect_unavailable([&] { b.device_info(0); }, "device_info");
  expect_unavailable([&] { b.mem_get_info(0); }, "mem_get_info");
  expect_unavailable([&] { b.stream_create(0, 0, 0); }, "stream_create");
  expect_unavailable([&] { b.event_create(0, 0); }, "event_create");
  expect_unavailable([&] { b.stream_synchronize(nullptr); }, "stream_synchronize");
  expect_unavailable([&] { b.memcpy_async(&lib, &lib, 8, nullptr); }, "memcpy_async");
  expect_unavailable([&] { b.stream_priority_range(); }, "stream_priority_range");
  expect_unavailable([&] { b.utilization_percent(0); }, "utilization");
  expect_unavailable([&] { b.module_load_data(0, kFillPtx); }, "module_load_data");
  expect_unavailable([&] { b.device_sm_resource(0); }, "device_sm_resource");
  expect_unavailable([&] { b.green_context_create(0, 8, nullptr); }, "green_context_create");

  // GDS: the probe explains itself without throwing; registration refuses cleanly.
  GdsStatus gds = b.gds_status();
  EXPECT_FALSE(gds.available);
  EXPECT_NE(gds.reason.find(reason), std::string::npos) << gds.reason;
  std::string why;
  EXPECT_THROW(b.gds_file_register(0, &why), NotSupportedError);
  EXPECT_NO_THROW(b.green_context_destroy(nullptr));

  // The thread's current device defaults to 0 and never throws.
  EXPECT_EQ(b.current_device(), 0);
  // Releasing null handles is a no-op, never a driver call.
  EXPECT_NO_THROW(b.stream_destroy(nullptr));
  EXPECT_NO_THROW(b.event_destroy(nullptr));
  EXPECT_NO_THROW(b.mem_free(0, nullptr));
  EXPECT_NO_THROW(b.host_free_pinned(nullptr));
}

// ------------------------------------------------------------------------------ GPU tests

TEST_F(CudaBackendGpu, DevicePropertiesAreSane) {
  REQUIRE_GPU();
  Backend& b = cuda();
  for (int d = 0; d < b.device_count(); ++d) {
    DeviceInfo info = b.device_info(d);
    EXPECT_FALSE(info.name.empty());
    EXPECT_GE(info.major, 3);
    EXPECT_GE(info.minor, 0);
    EXPECT_GT(info.total_memory, std::size_t{1} << 28);
    EXPECT_GT(info.multi_processor_count, 0);
    EXPECT_EQ(info.warp_size, 32);
    EXPECT_GE(info.max_threads_per_block, 512);
    EXPECT_GE(info.max_threads_per_multi_processor, info.max_threads_per_block);
    EXPECT_GT(info.L2_cache_size, 0);
    EXPECT_GT(info.regs_per_multiprocessor, 0);
    EXPECT_GE(info.shared_memory_per_block_optin, info.shared_memory_per_block);
    EXPECT_GE(info.shared_memory_per_multiprocessor, info.shared_memory_per_block);
    EXPECT_GT(info.memory_bus_width, 0);
    EXPECT_EQ(info.uuid.size(), 36u);
    EXPECT_NE(info.uuid, "00000000-0000-0000-0000-000000000000");

    MemInfo m = b.mem_get_info(d);
    EXPECT_GT(m.total, 0u);
    EXPECT_LE(m.free, m.total);
    EXPECT_LE(m.total, info.total_memory);
    EXPECT_FALSE(b.can_access_peer(d, d));
  }
  EXPECT_GE(b.driver_version(), 12080);
  auto [least, greatest] = b.stream_priority_range();
  EXPECT_GE(least, greatest);  // CUDA: numerically lower = higher priority
  EXPECT_THROW(b.device_info(b.device_count()), AcceleratorError);
  EXPECT_THROW(b.set_current_device(-1), AcceleratorError);
}

TEST_F(CudaBackendGpu, CurrentDeviceIsPerThreadAndScopedSwitchesRestoreIt) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  EXPECT_EQ(b.current_device(), 0);
  int other_thread_device = -1;
  std::thread([&] { other_thread_device = b.current_device(); }).join();
  EXPECT_EQ(other_thread_device, 0);
  if (b.device_count() > 1) {
    std::thread([&] {
      b.set_current_device(1);
      other_thread_device = b.current_device();
    }).join();
    EXPECT_EQ(other_thread_device, 1);
    EXPECT_EQ(b.current_device(), 0);  // unaffected by the other thread
    void* p = b.mem_alloc(1, 4096);    // switches to device 1 only for the call
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(b.current_device(), 0);
    EXPECT_EQ(b.pointer_device(p), 1);
    b.mem_free(1, p);
    if (b.can_access_peer(0, 1)) {
      EXPECT_NO_THROW(b.enable_peer_access(0, 1));
      EXPECT_NO_THROW(b.enable_peer_access(0, 1));  // idempotent
    }
  }
}

TEST_F(CudaBackendGpu, AllocFreeAndOutOfMemoryReturnsNull) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  void* p = b.mem_alloc(0, 1 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(b.pointer_device(p), 0);
  EXPECT_EQ(b.pointer_device(static_cast<char*>(p) + 4096), 0);
  b.mem_free(0, p);

  EXPECT_EQ(b.mem_alloc(0, std::size_t{1} << 50), nullptr);  // 1 PiB: out of memory, no throw

  int local = 0;
  EXPECT_EQ(b.pointer_device(&local), -1);
  EXPECT_EQ(b.pointer_device(nullptr), -1);
  void* pinned = b.host_alloc_pinned(4096);
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(b.pointer_device(pinned), -1);
  b.host_free_pinned(pinned);

  // Stream-ordered allocation.
  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  void* a = b.mem_alloc_async(0, 1 << 20, s);
  ASSERT_NE(a, nullptr);
  b.memset_d8_async(a, 1, 1 << 20, s);
  b.mem_free_async(a, s);
  b.stream_synchronize(s);
  b.stream_destroy(s);
}

TEST_F(CudaBackendGpu, MemcpyRoundTripThroughPinnedMemory) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  constexpr std::size_t n = 1 << 16;
  auto* h_in = static_cast<unsigned char*>(b.host_alloc_pinned(n));
  auto* h_out = static_cast<unsigned char*>(b.host_alloc_pinned(n));
  ASSERT_TRUE(h_in && h_out);
  for (std::size_t i = 0; i < n; ++i) h_in[i] = static_cast<unsigned char>(i * 7 + 3);
  std::memset(h_out, 0, n);
  void* d = b.mem_alloc(0, n);
  void* d2 = b.mem_alloc(0, n);
  ASSERT_TRUE(d && d2);

  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  EXPECT_EQ(b.stream_device(s), 0);
  EXPECT_EQ(b.stream_priority(s), 0);
  b.memcpy_async(d, h_in, n, s);                                       // H2D
  b.memset_d8_async(static_cast<char*>(d) + 100, 0xAB, 50, s);         // device memset
  b.memcpy_async(d2, d, n, s);                                         // D2D
  b.memcpy_async(h_out, d2, n, s);                                     // D2H
  b.stream_synchronize(s);
  EXPECT_TRUE(b.stream_query(s));
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char expect = (i >= 100 && i < 150) ? 0xAB : h_in[i];
    ASSERT_EQ(h_out[i], expect) << "at byte " << i;
  }

  // The legacy default stream (null handle) works too.
  std::memset(h_out, 0, n);
  b.memcpy_async(h_out, d, n, nullptr);
  b.stream_synchronize(nullptr);
  EXPECT_EQ(h_out[0], h_in[0]);
  EXPECT_EQ(b.stream_device(nullptr), 0);

  b.stream_destroy(s);
  b.mem_free(0, d);
  b.mem_free(0, d2);
  b.host_free_pinned(h_in);
  b.host_free_pinned(h_out);
}

TEST_F(CudaBackendGpu, StreamsEventsAndTiming) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  auto [least, greatest] = b.stream_priority_range();
  StreamHandle hi = b.stream_create(0, greatest, kStreamNonBlocking);
  StreamHandle lo = b.stream_create(0, least, 0);
  EXPECT_EQ(b.stream_priority(hi), greatest);
  EXPECT_EQ(b.stream_priority(lo), least);

  constexpr std::size_t n = std::size_t{256} << 20;
  void* d = b.mem_alloc(0, n);
  ASSERT_NE(d, nullptr);
  EventHandle start = b.event_create(0, 0);
  EventHandle end = b.event_create(0, 0);
  b.event_record(start, hi);
  for (int i = 0; i < 8; ++i) b.memset_d8_async(d, static_cast<unsigned char>(i), n, hi);
  b.event_record(end, hi);
  b.stream_wait_event(lo, end);  // lo's later work waits for hi's memsets

  auto* h = static_cast<unsigned char*>(b.host_alloc_pinned(16));
  b.memcpy_async(h, d, 16, lo);
  b.event_synchronize(end);
  EXPECT_TRUE(b.event_query(end));
  float ms = b.event_elapsed_ms(start, end);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 60000.0f);
  b.stream_synchronize(lo);
  EXPECT_EQ(h[0], 7);  // the last memset, ordered by the event wait

  // Timing disabled events cannot be timed: a driver error, reported as AcceleratorError.
  EventHandle nt = b.event_create(0, kEventDisableTiming);
  b.event_record(nt, hi);
  b.event_synchronize(nt);
  EXPECT_THROW(b.event_elapsed_ms(start, nt), AcceleratorError);

  // IPC handles (opening needs a second process; the handle must be produced).
  EventHandle ipc = b.event_create(0, kEventInterprocess | kEventDisableTiming);
  IpcHandle eh = b.event_ipc_handle(ipc);
  IpcHandle mh = b.mem_ipc_handle(d);
  auto nonzero = [](const IpcHandle& x) {
    return std::any_of(std::begin(x.bytes), std::end(x.bytes), [](unsigned char c) { return c; });
  };
  EXPECT_TRUE(nonzero(eh));
  EXPECT_TRUE(nonzero(mh));

  for (EventHandle e : {start, end, nt, ipc}) b.event_destroy(e);
  b.host_free_pinned(h);
  b.mem_free(0, d);
  b.stream_destroy(hi);
  b.stream_destroy(lo);
}

TEST_F(CudaBackendGpu, HostTasksRunInStreamOrder) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  constexpr std::size_t n = std::size_t{64} << 20;
  void* d = b.mem_alloc(0, n);
  auto* h = static_cast<unsigned char*>(b.host_alloc_pinned(4));
  ASSERT_TRUE(d && h);
  h[0] = 0;

  std::mutex mu;
  std::vector<int> order;
  unsigned char seen_by_task = 0;
  b.launch_host_task(s, [&] { std::lock_guard l(mu); order.push_back(1); });
  b.memset_d8_async(d, 42, n, s);
  b.memcpy_async(h, d, 4, s);
  b.launch_host_task(s, [&] {  // must see the copy that precedes it in the stream
    std::lock_guard l(mu);
    seen_by_task = h[0];
    order.push_back(2);
  });
  b.launch_host_task(s, [] { throw std::runtime_error("thrown inside a host task"); });
  b.launch_host_task(s, [&] { std::lock_guard l(mu); order.push_back(3); });
  b.stream_synchronize(s);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(seen_by_task, 42);

  b.host_free_pinned(h);
  b.mem_free(0, d);
  b.stream_destroy(s);
}

TEST_F(CudaBackendGpu, VirtualMemoryReserveCreateMap) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  std::size_t g = b.vm_granularity(0);
  ASSERT_GT(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u);  // a power of two (2 MiB on current GPUs)

  std::uintptr_t va = b.vm_reserve(0, 4 * g);
  ASSERT_NE(va, 0u);
  PhysMemHandle h0 = b.vm_create(0, g);
  PhysMemHandle h1 = b.vm_create(0, g);
  ASSERT_NE(h0, 0u);
  ASSERT_NE(h1, 0u);
  b.vm_map(va, g, h0, 0);
  b.vm_map(va + g, g, h1, 0);  // contiguous growth, as expandable segments do
  auto* p = reinterpret_cast<void*>(va);
  EXPECT_EQ(b.pointer_device(p), 0);

  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  b.memset_d8_async(p, 0x5A, 2 * g, s);  // spans both physical chunks
  auto* host = static_cast<unsigned char*>(b.host_alloc_pinned(2 * g));
  b.memcpy_async(host, p, 2 * g, s);
  b.stream_synchronize(s);
  EXPECT_EQ(host[0], 0x5A);
  EXPECT_EQ(host[g - 1], 0x5A);
  EXPECT_EQ(host[g], 0x5A);
  EXPECT_EQ(host[2 * g - 1], 0x5A);

  b.vm_unmap(va + g, g);
  b.vm_unmap(va, g);
  b.vm_destroy(h0);
  b.vm_destroy(h1);
  b.vm_release(va, 4 * g);
  b.host_free_pinned(host);
  b.stream_destroy(s);
}

TEST_F(CudaBackendGpu, KernelModuleLoadAndLaunch) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  ModuleHandle m = b.module_load_data(0, kFillPtx);
  ASSERT_NE(m, nullptr);
  FunctionHandle f = b.module_get_function(m, "cudakit_test_fill");
  ASSERT_NE(f, nullptr);
  EXPECT_THROW(b.module_get_function(m, "no_such_kernel"), AcceleratorError);

  constexpr unsigned n = 1000;
  void* d = b.mem_alloc(0, n * sizeof(unsigned));
  auto* h = static_cast<unsigned*>(b.host_alloc_pinned(n * sizeof(unsigned)));
  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  unsigned value = 100, count = n;
  void* args[] = {&d, &value, &count};
  b.launch_kernel(f, Dim3{(n + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, s, args);
  b.memcpy_async(h, d, n * sizeof(unsigned), s);
  b.stream_synchronize(s);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(h[i], 100 + i) << i;

  // Captured kernels are labelled with their name.
  b.stream_begin_capture(s, CaptureMode::thread_local_);
  b.launch_kernel(f, Dim3{(n + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, s, args);
  GraphHandle g = b.stream_end_capture(s);
  std::vector<GraphNodeInfo> nodes = b.graph_nodes(g);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].type, GraphNodeType::kernel);
  EXPECT_EQ(nodes[0].label, "cudakit_test_fill");
  b.graph_destroy(g);

  b.stream_destroy(s);
  b.host_free_pinned(h);
  b.mem_free(0, d);
  b.module_unload(m);
}

TEST_F(CudaBackendGpu, CaptureMemsetAndHostTaskThenReplay) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  StreamHandle s = b.stream_create(0, 0, kStreamNonBlocking);
  constexpr std::size_t n = 4096;
  void* d = b.mem_alloc(0, n);
  auto* h = static_cast<unsigned char*>(b.host_alloc_pinned(n));
  ASSERT_TRUE(d && h);

  std::uint64_t id = 0;
  EXPECT_EQ(b.stream_capture_status(s, &id), CaptureStatus::none);
  std::atomic<int> runs{0};
  b.stream_begin_capture(s, CaptureMode::global);
  EXPECT_EQ(b.stream_capture_status(s, &id), CaptureStatus::active);
  EXPECT_NE(id, 0u);
  b.memset_d8_async(d, 0x3C, n, s);
  b.launch_host_task(s, [&runs] { runs.fetch_add(1); });
  GraphHandle g = b.stream_end_capture(s);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(b.stream_capture_status(s, nullptr), CaptureStatus::none);
  EXPECT_EQ(runs.load(), 0);  // captured, not executed

  std::vector<GraphNodeInfo> nodes = b.graph_nodes(g);
  ASSERT_EQ(nodes.size(), 2u);
  const GraphNodeInfo* memset_node = nullptr;
  const GraphNodeInfo* host_node = nullptr;
  for (const auto& node : nodes) {
    if (node.type == GraphNodeType::memset) memset_node = &node;
    if (node.type == GraphNodeType::host) host_node = &node;
  }
  ASSERT_TRUE(memset_node && host_node);
  EXPECT_EQ(memset_node->label, "memset");
  EXPECT_EQ(host_node->label, "host");
  EXPECT_NE(memset_node->id, host_node->id);
  std::vector<GraphEdge> edges = b.graph_edges(g);
  ASSERT_EQ(edges.size(), 1u);
  EXPECT_EQ(edges[0].from, memset_node->id);
  EXPECT_EQ(edges[0].to, host_node->id);

  char dot_path[] = "/tmp/cudakit_graph_XXXXXX";
  int fd = mkstemp(dot_path);
  ASSERT_GE(fd, 0);
  close(fd);
  b.graph_debug_dot_print(g, dot_path);
  std::ifstream dot(dot_path);
  std::string first;
  std::getline(dot, first);
  EXPECT_NE(first.find("digraph"), std::string::npos);
  std::remove(dot_path);

  GraphExecHandle exec = b.graph_instantiate(g);
  ASSERT_NE(exec, nullptr);
  b.graph_destroy(g);  // the executable keeps what it needs (including the host task)
  b.graph_launch(exec, s);
  b.graph_launch(exec, s);
  b.memcpy_async(h, d, n, s);
  b.stream_synchronize(s);
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(h[0], 0x3C);
  EXPECT_EQ(h[n - 1], 0x3C);
  b.graph_exec_destroy(exec);

  b.host_free_pinned(h);
  b.mem_free(0, d);
  b.stream_destroy(s);
}

TEST_F(CudaBackendGpu, NvmlTelemetryIsInRange) {
  REQUIRE_GPU();
  Backend& b = cuda();
  b.set_current_device(0);
  try {
    int util = b.utilization_percent(0);
    EXPECT_GE(util, 0);
    EXPECT_LE(util, 100);
  } catch (const NotSupportedError& e) {
    GTEST_SKIP() << "NVML unavailable: " << e.what();
  }
  int mem_util = b.memory_utilization_percent(0);
  EXPECT_GE(mem_util, 0);
  EXPECT_LE(mem_util, 100);
  int temp = b.temperature_c(0);
  EXPECT_GT(temp, 0);
  EXPECT_LT(temp, 120);
  int mhz = b.clock_rate_mhz(0);
  EXPECT_GT(mhz, 0);
  EXPECT_LT(mhz, 5000);
  try {
    int mw = b.power_draw_mw(0);
    EXPECT_GT(mw, 0);
    EXPECT_LT(mw, 2'000'000);
  } catch (const NotSupportedError&) {
    // some boards do not report power; that must be the only failure mode
  }
  std::size_t used = b.device_memory_used(0);
  EXPECT_GT(used, 0u);
  EXPECT_LE(used, b.device_info(0).total_memory + (std::size_t{1} << 30));
  void* p = b.mem_alloc(0, 64 << 20);  // guarantee this process holds device memory
  for (const auto& proc : b.gpu_processes(0)) {
    EXPECT_GT(proc.pid, 0);
  }
  b.mem_free(0, p);
}

}  // namespace

// ---------------------------------------------------------- green contexts and cuFile (GPU)

TEST_F(CudaBackendGpu, GreenContextsPartitionTheDevice) {
  REQUIRE_GPU();
  Backend& b = cuda();
  SmResourceInfo r;
  try {
    r = b.device_sm_resource(0);
  } catch (const NotSupportedError& e) {
    GTEST_SKIP() << "driver without green contexts: " << e.what();
  }
  EXPECT_EQ(r.sm_count, b.device_info(0).multi_processor_count);
  ASSERT_GT(r.min_partition_sms, 0);
  ASSERT_GT(r.sm_alignment, 0);
  int want = r.min_partition_sms * 2;
  want = (want + r.sm_alignment - 1) / r.sm_alignment * r.sm_alignment;
  int granted = 0;
  GreenContextHandle g = b.green_context_create(0, want, &granted);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(granted, want);
  StreamHandle s = b.green_context_stream_create(g, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(b.stream_device(s), 0);
  // An ordinary stream for copies and events.
  void* d = b.mem_alloc(0, 4096);
  ASSERT_NE(d, nullptr);
  b.memset_d8_async(d, 0x5a, 4096, s);
  std::vector<unsigned char> host(4096);
  b.memcpy_async(host.data(), d, 4096, s);
  EventHandle e = b.event_create(0, kEventDisableTiming);
  b.event_record(e, s);
  b.event_synchronize(e);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0x5a; }));
  b.event_destroy(e);
  b.mem_free(0, d);
  b.stream_destroy(s);
  b.green_context_destroy(g);
  // More SMs than the device has: the split makes no group.
  EXPECT_THROW(b.green_context_create(0, r.sm_count + r.sm_alignment, nullptr), AcceleratorError);
}

TEST_F(CudaBackendGpu, GdsStatusIsConsistent) {
  REQUIRE_GPU();
  Backend& b = cuda();
  GdsStatus s = b.gds_status();
  EXPECT_EQ(s.available, s.reason.empty()) << s.reason;
  bool listed = false;
  for (const LibraryInfo& lib : b.optional_libraries()) listed |= lib.name == "cuFile";
  EXPECT_TRUE(listed);
}
