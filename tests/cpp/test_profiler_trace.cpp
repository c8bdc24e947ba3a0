// cudakit::profiler::Trace on the backend the suite runs on (emulated in CI, the H200 through
// scripts/gpu-check.sh): event kinds, Kineto's required args, flows, graph node ids,
// annotations merged into kernel args, NVTX ranges and their GPU projection, allocator and
// graph lifecycle events, errors, and the collector's cost per record.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "backend/backend.hpp"
#include "support/emulated_testing.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graph_annotations.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/nvtx.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/profiler.hpp"
#include "cudakit/random.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/tensor.hpp"
#include "profiler/collector.hpp"
#include "profiler/occupancy.hpp"

using namespace cudakit;
namespace ga = cudakit::graph_annotations;
using profiler::Trace;
using profiler::TraceEvent;
using profiler::TraceOptions;

namespace {

bool have_device() { return detail::backend().device_count() > 0; }

#define REQUIRE_DEVICE()                                  \
  do {                                                    \
    if (!have_device()) GTEST_SKIP() << "no device";      \
  } while (0)

// A device part is missing (cuda without CUPTI, or CUPTI held by another tool).
#define REQUIRE_DEVICE_RECORDS(trace)                                                   \
  do {                                                                                  \
    if (!(trace).warnings().empty() && !detail::is_emulated_backend()) {                \
      GTEST_SKIP() << "no device activity here: " << (trace).warnings().front();        \
    }                                                                                   \
  } while (0)

std::vector<const TraceEvent*> with(const std::vector<TraceEvent>& ev, const std::string& cat,
                                    char phase = 'X') {
  std::vector<const TraceEvent*> out;
  for (const TraceEvent& e : ev) {
    if (e.category == cat && e.phase == phase) out.push_back(&e);
  }
  return out;
}

const profiler::TraceArgValue* arg(const TraceEvent& e, const std::string& key) {
  for (const auto& [k, v] : e.args) {
    if (k == key) return &v;
  }
  return nullptr;
}

template <class T>
T arg_as(const TraceEvent& e, const std::string& key) {
  const auto* v = arg(e, key);
  EXPECT_NE(v, nullptr) << "missing arg '" << key << "' on " << e.name;
  if (!v) return T{};
  if constexpr (std::is_same_v<T, std::int64_t>) {
    if (auto* u = std::get_if<std::uint64_t>(v)) return static_cast<std::int64_t>(*u);
  }
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (auto* i = std::get_if<std::int64_t>(v)) return static_cast<std::uint64_t>(*i);
  }
  const T* p = std::get_if<T>(v);
  EXPECT_NE(p, nullptr) << "arg '" << key << "' has another type on " << e.name;
  return p ? *p : T{};
}

// Kineto's kernel args (CuptiActivity.h) plus graph ids.
const char* kKernelArgs[] = {"device", "stream", "correlation", "registers per thread",
                             "shared memory", "blocks per SM", "warps per SM", "grid", "block",
                             "est. achieved occupancy %", "graph id", "graph node id"};

struct Profiled : ::testing::Test {
  void SetUp() override {
    REQUIRE_DEVICE();
    ga::clear_kernel_annotations();
  }
  void TearDown() override { ga::clear_kernel_annotations(); }
};

}  // namespace

TEST_F(Profiled, EagerKernelsHaveKinetoArgsAndLaunchFlows) {
  Tensor x = zeros({64}, device_options());
  Tensor one = ones({64}, device_options());
  synchronize();
  Trace trace;
  EXPECT_TRUE(trace.recording());
  for (int i = 0; i < 3; ++i) x = x + one;
  trace.stop();
  EXPECT_FALSE(trace.recording());
  REQUIRE_DEVICE_RECORDS(trace);
  const std::vector<TraceEvent> ev = trace.events();
  auto kernels = with(ev, "kernel");
  ASSERT_GE(kernels.size(), 3u);
  std::set<std::uint64_t> kernel_corr;
  for (const TraceEvent* k : kernels) {
    for (const char* key : kKernelArgs) EXPECT_NE(arg(*k, key), nullptr) << key;
    EXPECT_EQ(k->pid, arg_as<std::int64_t>(*k, "device"));
    EXPECT_EQ(k->tid, arg_as<std::int64_t>(*k, "stream"));
    EXPECT_EQ(arg_as<std::uint64_t>(*k, "graph node id"), 0u);  // eager: not from a graph
    EXPECT_GE(k->dur_ns, 0);
    kernel_corr.insert(arg_as<std::uint64_t>(*k, "correlation"));
    const auto grid = arg_as<std::vector<std::int64_t>>(*k, "grid");
    EXPECT_EQ(grid.size(), 3u);
  }
  // Every kernel is the end of an ac2g flow whose start is its launch on a host thread.
  std::map<std::uint64_t, const TraceEvent*> starts, ends;
  for (const TraceEvent* f : with(ev, "ac2g", 's')) starts[f->flow_id] = f;
  for (const TraceEvent* f : with(ev, "ac2g", 'f')) ends[f->flow_id] = f;
  auto launches = with(ev, detail::is_emulated_backend() ? "cuda_driver" : "cuda_driver");
  std::map<std::uint64_t, const TraceEvent*> launch_by_corr;
  for (const TraceEvent* l : launches) launch_by_corr[arg_as<std::uint64_t>(*l, "correlation")] = l;
  for (std::uint64_t c : kernel_corr) {
    ASSERT_TRUE(starts.count(c)) << "no flow start for correlation " << c;
    ASSERT_TRUE(ends.count(c));
    ASSERT_TRUE(launch_by_corr.count(c));
    EXPECT_EQ(starts[c]->ts_ns, launch_by_corr[c]->ts_ns);
    EXPECT_EQ(starts[c]->tid, launch_by_corr[c]->tid);
    EXPECT_LE(launch_by_corr[c]->ts_ns, ends[c]->ts_ns);  // launched before it ran
  }
  if (detail::is_emulated_backend()) {
    EXPECT_EQ(kernels.front()->name, "ck_binary");  // run_cpu's kernel name
    EXPECT_EQ(launch_by_corr.begin()->second->name, "cuLaunchKernel");
  }
  // Metadata: one process per device, one thread per stream.
  bool device_process = false, stream_thread = false;
  for (const TraceEvent& e : ev) {
    if (e.phase != 'M') continue;
    if (e.name == "process_labels" && e.pid == kernels.front()->pid) device_process = true;
    if (e.name == "thread_name" && e.pid == kernels.front()->pid &&
        e.tid == kernels.front()->tid) {
      stream_thread = std::get<std::string>(e.args.at(0).second) ==
                      "stream " + std::to_string(kernels.front()->tid);
    }
  }
  EXPECT_TRUE(device_process);
  EXPECT_TRUE(stream_thread);
}

TEST_F(Profiled, CopiesMemsetsAndSyncs) {
  Tensor x = ones({256}, device_options());
  Tensor h;
  Trace trace;
  h = x.to(Device::cpu());  // a DtoH copy and a stream sync
  synchronize();
  trace.stop();
  REQUIRE_DEVICE_RECORDS(trace);
  const auto ev = trace.events();
  auto copies = with(ev, "gpu_memcpy");
  ASSERT_FALSE(copies.empty());
  bool dtoh = false;
  for (const TraceEvent* c : copies) {
    EXPECT_GT(arg_as<std::uint64_t>(*c, "bytes"), 0u);
    EXPECT_NE(arg(*c, "graph node id"), nullptr);
    dtoh = dtoh || c->name.rfind("Memcpy DtoH", 0) == 0;
  }
  EXPECT_TRUE(dtoh);
  auto syncs = with(ev, "cuda_sync");
  ASSERT_FALSE(syncs.empty());
  std::set<std::string> names;
  for (const TraceEvent* s : syncs) names.insert(s->name);
  EXPECT_TRUE(names.count("Context Sync") || names.count("Stream Sync"));
}

TEST_F(Profiled, GraphReplayKernelsCarryNodeIdsAndMergedAnnotations) {
  if (!ga::is_available()) GTEST_SKIP() << "graph tools ids unavailable";
  // The seed's annotation example, smaller on the emulated backend.
  const std::int64_t n = detail::is_emulated_backend() ? 32 : 1024;
  Tensor x = randn({n, n}, device_options());
  Tensor y = matmul(x, x.t());
  Tensor z = matmul(relu(y), x);
  synchronize();
  CUDAGraph g;
  CaptureOptions opts;
  opts.enable_annotations = true;
  capture(g, [&] {
    {
      ga::MarkKernels scope("attention");
      y = matmul(x, x.t());
    }
    {
      ga::MarkKernels scope(ga::Annotation{{"name", std::string("mlp")},
                                           {"layer", std::int64_t{3}}});
      z = matmul(relu(y), x);
    }
  }, opts);
  const auto annotations = ga::get_kernel_annotations();
  ASSERT_FALSE(annotations.empty());
  Trace trace;
  g.replay();
  synchronize();
  trace.stop();
  REQUIRE_DEVICE_RECORDS(trace);
  const auto ev = trace.events();
  const std::uint32_t exec_id = *g.exec_graph_id();
  std::size_t annotated = 0, in_graph = 0;
  for (const TraceEvent* k : with(ev, "kernel")) {
    const auto node = arg_as<std::uint64_t>(*k, "graph node id");
    if (node == 0) continue;
    ++in_graph;
    EXPECT_EQ(arg_as<std::uint64_t>(*k, "graph id"), exec_id);
    EXPECT_EQ(node >> 32, exec_id);
    auto it = annotations.find(node);
    ASSERT_NE(it, annotations.end()) << "kernel " << k->name << " node " << node;
    // The join of the seed, done by the tracer: every annotation key is in args, equal.
    for (const auto& [key, value] : it->second.front()) {
      const auto* v = arg(*k, key);
      ASSERT_NE(v, nullptr) << key;
      std::visit(
          [&](const auto& want) {
            using T = std::decay_t<decltype(want)>;
            if constexpr (std::is_same_v<T, std::string>) {
              EXPECT_EQ(std::get<std::string>(*v), want);
            } else if constexpr (std::is_same_v<T, std::int64_t>) {
              EXPECT_EQ(std::get<std::int64_t>(*v), want);
            }
          },
          value);
    }
    ++annotated;
  }
  EXPECT_GE(in_graph, 2u);
  EXPECT_EQ(annotated, in_graph);
  // The replay is one cuGraphLaunch on the host, flowing to every kernel of the graph.
  std::size_t graph_launches = 0;
  for (const TraceEvent* a : with(ev, "cuda_driver")) graph_launches += a->name == "cuGraphLaunch";
  EXPECT_EQ(graph_launches, 1u);
  // Graph lifecycle: the replay span on the host.
  bool replay = false;
  for (const TraceEvent* e : with(ev, "cuda_graph")) {
    if (e->name == "graph replay") {
      replay = true;
      EXPECT_EQ(arg_as<std::uint64_t>(*e, "graph id"), exec_id);
    }
  }
  EXPECT_TRUE(replay);
}

TEST_F(Profiled, AnnotationsOfAGraphDestroyedDuringTheTraceAreKept) {
  if (!ga::is_available()) GTEST_SKIP() << "graph tools ids unavailable";
  Tensor x = zeros({64}, device_options());
  Tensor one = ones({64}, device_options());
  synchronize();
  Trace trace;
  {
    CUDAGraph g;
    CaptureOptions opts;
    opts.enable_annotations = true;
    capture(g, [&] {
      ga::MarkKernels scope("step");
      x = x + one;
    }, opts);
    g.replay();
    synchronize();
  }  // destroyed: its registry entries are purged
  EXPECT_EQ(ga::annotated_node_count(), 0u);
  trace.stop();
  REQUIRE_DEVICE_RECORDS(trace);
  const auto ev = trace.events();
  std::size_t annotated = 0;
  for (const TraceEvent* k : with(ev, "kernel")) {
    if (arg_as<std::uint64_t>(*k, "graph node id") == 0) continue;
    EXPECT_EQ(arg_as<std::string>(*k, "name"), "step");
    ++annotated;
  }
  EXPECT_GE(annotated, 1u);
  std::set<std::string> lifecycle;
  for (const TraceEvent& e : ev) {
    if (e.category == "cuda_graph") lifecycle.insert(e.name);
  }
  for (const char* phase : {"graph capture", "graph instantiate", "graph replay", "graph destroy"}) {
    EXPECT_TRUE(lifecycle.count(phase)) << phase;
  }
}

TEST_F(Profiled, NvtxRangesBecomeUserAnnotationsAndGpuSpans) {
  Tensor x = zeros({64}, device_options());
  Tensor one = ones({64}, device_options());
  synchronize();
  Trace trace;
  nvtx::range_push("outer");
  {
    nvtx::ScopedRange inner(nvtx::Attributes{"inner \"quoted\""}, nvtx::Domain::cudakit());
    x = x + one;
  }
  nvtx::mark("here");
  const std::uint64_t id = nvtx::range_start("crossing");
  std::thread([id] { nvtx::range_end(id); }).join();
  nvtx::range_pop();
  trace.stop();
  const auto ev = trace.events();
  std::map<std::string, const TraceEvent*> ranges;
  for (const TraceEvent* e : with(ev, "user_annotation")) ranges[e->name] = e;
  ASSERT_TRUE(ranges.count("outer"));
  ASSERT_TRUE(ranges.count("inner \"quoted\""));
  ASSERT_TRUE(ranges.count("crossing"));
  EXPECT_EQ(arg_as<std::string>(*ranges["inner \"quoted\""], "domain"), "cudakit");
  EXPECT_LE(ranges["outer"]->ts_ns, ranges["inner \"quoted\""]->ts_ns);
  EXPECT_GE(ranges["outer"]->ts_ns + ranges["outer"]->dur_ns,
            ranges["inner \"quoted\""]->ts_ns + ranges["inner \"quoted\""]->dur_ns);
  EXPECT_EQ(with(ev, "user_annotation", 'i').size(), 1u);  // the mark
  REQUIRE_DEVICE_RECORDS(trace);
  std::set<std::string> gpu;
  for (const TraceEvent* e : with(ev, "gpu_user_annotation")) {
    gpu.insert(e->name);
    EXPECT_GE(e->pid, 0);  // on a device row
  }
  EXPECT_TRUE(gpu.count("outer"));
  EXPECT_TRUE(gpu.count("inner \"quoted\""));
  EXPECT_FALSE(gpu.count("crossing"));  // nothing was launched inside it
}

TEST_F(Profiled, AllocatorEventsCarryBytesAndTotals) {
  synchronize();
  empty_cache();
  Trace trace;
  {
    Tensor t = zeros({1 << 16}, device_options());  // 256 KiB
    synchronize();
  }
  trace.stop();
  const auto ev = trace.events();
  std::int64_t allocated = 0, freed = 0;
  bool segment = false;
  for (const TraceEvent* e : with(ev, "cpu_instant_event", 'i')) {
    if (e->name == "[memory]") {
      const auto bytes = arg_as<std::int64_t>(*e, "Bytes");
      (bytes > 0 ? allocated : freed) += bytes;
      EXPECT_GE(arg_as<std::int64_t>(*e, "Total Reserved"),
                arg_as<std::int64_t>(*e, "Total Allocated"));
      EXPECT_EQ(arg_as<std::int64_t>(*e, "Device Type"), 1);
    }
    segment = segment || e->name == "[memory] segment_alloc" || e->name == "[memory] segment_map";
  }
  EXPECT_GE(allocated, std::int64_t{1} << 18);
  EXPECT_EQ(allocated + freed, 0);
  EXPECT_TRUE(segment);  // the cache was empty: a segment was obtained
  EXPECT_FALSE(with(ev, "cpu_instant_event", 'C').empty());  // totals counter track
}

TEST_F(Profiled, OptionsSelectSources) {
  Tensor x = zeros({64}, device_options());
  synchronize();
  TraceOptions o;
  o.device = false;
  o.api = false;
  o.memory = false;
  Trace trace(o);
  nvtx::range_push("only this");
  x = x + 1.0;
  Tensor more = zeros({128}, device_options());
  nvtx::range_pop();
  trace.stop();
  const auto ev = trace.events();
  EXPECT_TRUE(with(ev, "kernel").empty());
  EXPECT_TRUE(with(ev, "cuda_driver").empty());
  EXPECT_TRUE(with(ev, "cpu_instant_event", 'i').empty());
  EXPECT_EQ(with(ev, "user_annotation").size(), 1u);
}

TEST_F(Profiled, OneTraceAtATimeAndResultsOnlyAfterStop) {
  Trace a;
  EXPECT_THROW(Trace b, Error);
  EXPECT_THROW(a.events(), Error);
  EXPECT_THROW(a.export_chrome_trace("x.json"), Error);
  a.stop();
  a.stop();  // idempotent
  Trace c;   // the slot is free again
  c.stop();
  Trace moved = std::move(c);
  EXPECT_FALSE(moved.recording());
  EXPECT_NO_THROW(moved.events());
  EXPECT_THROW(c.events(), Error);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_FALSE(c.recording());
}

TEST_F(Profiled, ExportWritesKinetoLayoutAndReportsBadPaths) {
  Trace trace;
  nvtx::range_push("step");
  Tensor x = ones({16}, device_options());
  synchronize();
  nvtx::range_pop();
  trace.stop();
  EXPECT_THROW(trace.export_chrome_trace(""), ValueError);
  try {
    trace.export_chrome_trace("/nonexistent-dir/trace.json");
    FAIL() << "no error for a missing directory";
  } catch (const ValueError&) {
    FAIL() << "a missing directory is not a bad value";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/trace.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  const std::string path = ::testing::TempDir() + "cudakit_trace_test.json";
  trace.export_chrome_trace(path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  EXPECT_EQ(json.front(), '{');
  for (const char* key : {"\"schemaVersion\":1", "\"traceEvents\":[", "\"baseTimeNanoseconds\":",
                          "\"displayTimeUnit\":\"ms\"", "\"deviceProperties\":[",
                          "\"name\":\"step\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(trace.chrome_trace_json().size() + path.size(), json.size());  // same content
  std::remove(path.c_str());
}

// Issue 28 item 1: every kernel of a long loop has real timestamps. The tracer once flushed
// the backend's buffers before synchronizing, so records of work still queued came out with
// start = end = 0 (6439 of 7000 kernels of a 1000-replay loop on the H200); the emulated
// backend buffers its records as CUPTI does (reserved at enqueue, timed when the work runs),
// so the same mistake fails here too. Checked: as many kernels as launched, ts > 0 and
// dur >= 0, and on each stream the kernels in launch order without overlap.
void expect_every_kernel_timed(const Trace& trace, std::size_t launched) {
  EXPECT_TRUE(trace.warnings().empty()) << trace.warnings().front();
  EXPECT_GT(trace.base_time_ns(), 1600000000LL * 1000000000LL);  // after 2020, not 1970
  const std::vector<TraceEvent> ev = trace.events();
  const auto kernels = with(ev, "kernel");
  EXPECT_EQ(kernels.size(), launched);
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<const TraceEvent*>> rows;
  std::size_t untimed = 0;
  for (const TraceEvent* k : kernels) {
    if (k->ts_ns <= 0 || k->dur_ns < 0) ++untimed;
    rows[{k->pid, k->tid}].push_back(k);
  }
  EXPECT_EQ(untimed, 0u) << "of " << kernels.size() << " kernels";
  for (auto& [row, ks] : rows) {
    // launch order (correlation; a replay's nodes share one, in node order) == time order
    std::stable_sort(ks.begin(), ks.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return arg_as<std::uint64_t>(*a, "correlation") < arg_as<std::uint64_t>(*b, "correlation");
    });
    std::size_t disorder = 0;
    for (std::size_t i = 1; i < ks.size(); ++i) {
      if (ks[i]->ts_ns < ks[i - 1]->ts_ns + ks[i - 1]->dur_ns) ++disorder;
    }
    EXPECT_EQ(disorder, 0u) << "stream " << row.second;
  }
}

TEST_F(Profiled, EveryKernelOfA1000ReplayGraphLoopIsTimestamped) {
  Tensor x = zeros({16}, device_options());
  Tensor one = ones({16}, device_options());
  synchronize();
  CUDAGraph g;
  capture(g, [&] {
    for (int i = 0; i < 5; ++i) add_(x, one);
  });
  synchronize();
  Trace trace;
  for (int i = 0; i < 1000; ++i) g.replay();
  trace.stop();  // no synchronize before: stop() must wait for the queue itself
  REQUIRE_DEVICE_RECORDS(trace);
  expect_every_kernel_timed(trace, 5000);
  EXPECT_EQ(sum(x).item().d, 16 * 5000.0);  // every replay ran
}

TEST_F(Profiled, EveryKernelOfA20kEagerLoopIsTimestamped) {
  Tensor x = zeros({16}, device_options());
  Tensor one = ones({16}, device_options());
  synchronize();
  Trace trace;
  for (int i = 0; i < 20000; ++i) add_(x, one);
  trace.stop();
  REQUIRE_DEVICE_RECORDS(trace);
  expect_every_kernel_timed(trace, 20000);
}

// Issue 28 item 2: a trace started and stopped on one thread while another thread captures a
// graph in CUDA's default (global) capture mode. Starting device activity makes "potentially
// unsafe" calls on the tracer's thread (CUPTI allocates its record buffers; the emulated
// backend models that), which a global-mode capture anywhere in the process forbids: the
// driver fails them and invalidates the capture. The tracer makes them in relaxed mode, so the
// capture ends fine and its graph replays.
TEST_F(Profiled, ATraceBesideAGlobalModeCaptureLeavesTheCaptureValid) {
  Tensor x = zeros({16}, device_options());
  Tensor one = ones({16}, device_options());
  synchronize();
  CUDAGraph g;
  std::string tracer_error;
  std::size_t tracer_kernels = 0;
  {
    GraphCapture cap(g);  // global mode, cudakit's (and torch's) default
    add_(x, one);
    std::thread tracer([&] {
      try {
        Trace t;
        t.stop();
        tracer_kernels = with(t.events(), "kernel").size();
      } catch (const std::exception& e) {
        tracer_error = e.what();
      }
    });
    tracer.join();
    add_(x, one);
    cap.end();  // threw CUDA_ERROR_STREAM_CAPTURE_INVALIDATED before the fix
  }
  EXPECT_EQ(tracer_error, "");
  EXPECT_EQ(tracer_kernels, 0u);  // captured work does not run: nothing to record
  g.replay();
  synchronize();
  EXPECT_EQ(sum(x).item().d, 16 * 2.0);
}

// The other order (issue 28): a trace started before the capture, stopped on this thread
// while another thread captures in global mode. stop() skips its device synchronize (a
// warning says so), and flushes and stops the device activity in relaxed mode: stopping
// releases the tool's record buffers, as "potentially unsafe" as allocating them (the
// emulated backend models both), so before the fix the capture ended invalidated.
TEST_F(Profiled, ATraceStoppedBesideAGlobalModeCaptureLeavesTheCaptureValid) {
  Tensor x = zeros({16}, device_options());
  Tensor one = ones({16}, device_options());
  synchronize();
  Trace trace;
  add_(x, one);  // traced; the capture's pre-capture synchronize completes it
  CUDAGraph g;
  std::atomic<int> phase{0};  // 1: the capture is live (or failed to begin), 2: stopped
  std::string capture_error;
  std::thread capturer([&] {
    try {
      GraphCapture cap(g);  // global mode, cudakit's (and torch's) default
      add_(x, one);
      phase = 1;
      while (phase.load() != 2) std::this_thread::yield();
      add_(x, one);
      cap.end();  // threw CUDA_ERROR_STREAM_CAPTURE_INVALIDATED before the fix
    } catch (const std::exception& e) {
      capture_error = e.what();
      phase = 1;
    }
  });
  while (phase.load() == 0) std::this_thread::yield();
  std::string stop_error;
  try {
    trace.stop();
  } catch (const std::exception& e) {
    stop_error = e.what();
  }
  phase = 2;
  capturer.join();
  EXPECT_EQ(stop_error, "");
  EXPECT_EQ(capture_error, "");
  const std::vector<std::string> w = trace.warnings();
  EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](const std::string& m) {
    return m.find("captures were in progress") != std::string::npos;
  })) << ::testing::PrintToString(w);
  EXPECT_EQ(with(trace.events(), "kernel").size(), 1u);  // the eager add_; captured work did not run
  EXPECT_FALSE(trace.chrome_trace_json().empty());  // exporting makes no driver call either
  g.replay();
  synchronize();
  EXPECT_EQ(sum(x).item().d, 16 * 3.0);
}

// Issue 28 item 5 from C++ (tests/python/test_profiler_formats.py decodes the files).
TEST_F(Profiled, ExportsGzipAndPerfettoProtobuf) {
  Tensor x = zeros({16}, device_options());
  Tensor one = ones({16}, device_options());
  synchronize();
  Trace trace;
  for (int i = 0; i < 100; ++i) add_(x, one);
  trace.stop();
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string dir = ::testing::TempDir();
  trace.export_chrome_trace(dir + "/ck_trace.json.gz");
  const std::string gz = read(dir + "/ck_trace.json.gz");
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
  EXPECT_LT(gz.size() * 3, trace.chrome_trace_json().size());
  trace.export_perfetto(dir + "/ck_trace.pftrace");
  const std::string pf = read(dir + "/ck_trace.pftrace");
  ASSERT_FALSE(pf.empty());
  EXPECT_EQ(static_cast<unsigned char>(pf[0]), 0x0A);  // Trace.packet (1, length-delimited)
  EXPECT_LT(pf.size() * 2, trace.chrome_trace_json().size());
  EXPECT_NE(pf.find("cuLaunchKernel"), std::string::npos);  // interned names are plain text
  EXPECT_THROW(trace.export_perfetto(""), ValueError);
  EXPECT_THROW(trace.export_perfetto(dir + "/no-such-dir/t.pftrace"), Error);
  std::remove((dir + "/ck_trace.json.gz").c_str());
  std::remove((dir + "/ck_trace.pftrace").c_str());
}

TEST(ProfilerTraceCollector, KernelRecordsCostAtMost100BytesEach) {
  using cudakit::profiler::detail::Collector;
  static_assert(sizeof(detail::ActivityRecord) <= 100);
  Collector& c = Collector::instance();
  const std::uint64_t session = 0x7F00000000000001ull;  // never used by a Trace
  c.begin(session);
  constexpr int kThreads = 4, kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c] {
      detail::ActivityRecord r;
      r.kind = detail::ActivityKind::kernel;
      r.name = "k";
      for (int i = 0; i < kPerThread; ++i) {
        r.start_ns = i;
        c.record(r);
      }
    });
  }
  for (auto& th : threads) th.join();
  auto got = c.end(session);
  EXPECT_EQ(got.records, std::size_t{kThreads} * kPerThread);
  std::size_t slots = 0;
  for (std::size_t c : got.chunk_capacity) slots += c;
  const std::size_t bytes = slots * sizeof(detail::ActivityRecord);
  EXPECT_LE(double(bytes) / double(got.records), 100.0);
  // After end() nothing is recorded.
  detail::ActivityRecord r;
  c.record(r);
  EXPECT_EQ(c.end(session).records, 0u);
}

TEST(ProfilerTraceCollector, StopWhileThreadsRecordLosesNothingItKept) {
  using cudakit::profiler::detail::Collector;
  Collector& c = Collector::instance();
  for (int round = 0; round < 20; ++round) {
    const std::uint64_t session = 0x7F00000000001000ull + round;
    c.begin(session);
    std::atomic<bool> go{true};
    std::atomic<std::size_t> accepted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        detail::ActivityRecord r;
        r.kind = detail::ActivityKind::user_mark;
        while (go.load()) {
          c.record(r);
          accepted.fetch_add(1);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto got = c.end(session);
    go = false;
    for (auto& th : threads) th.join();
    EXPECT_LE(got.records, accepted.load());  // records after end() are dropped, not kept
    std::size_t sum = 0;
    for (std::size_t n : got.chunk_sizes) sum += n;
    EXPECT_EQ(sum, got.records);
  }
}

TEST(ProfilerTraceOccupancy, MatchesTheOccupancyRules) {
  using namespace cudakit::profiler::detail;
  DeviceProperties h100;  // sm_90, 132 SMs
  h100.major = 9;
  h100.minor = 0;
  h100.multi_processor_count = 132;
  h100.max_threads_per_multi_processor = 2048;
  h100.warp_size = 32;
  h100.regs_per_multiprocessor = 65536;
  h100.shared_memory_per_multiprocessor = 228 * 1024;
  // 256 threads, 32 registers: 8 blocks by warps, 8 by registers -> full occupancy.
  KernelShape k{{132 * 8, 1, 1}, {256, 1, 1}, 0, 32};
  EXPECT_EQ(max_resident_blocks(h100, k), 8);
  Occupancy o = kernel_occupancy(h100, k);
  EXPECT_DOUBLE_EQ(o.blocks_per_sm, 8.0);
  EXPECT_DOUBLE_EQ(o.warps_per_sm, 64.0);
  EXPECT_EQ(o.achieved_percent, 100);
  // 128 registers per thread: 4096 per warp -> 16 warps -> 2 blocks -> 25%.
  k.registers = 128;
  EXPECT_EQ(max_resident_blocks(h100, k), 2);
  EXPECT_EQ(kernel_occupancy(h100, k).achieved_percent, 25);
  // 100 KB of shared memory per block (+1 KB reserved): 2 blocks fit in 228 KB.
  k.registers = 32;
  k.shared_bytes = 100 * 1024;
  EXPECT_EQ(max_resident_blocks(h100, k), 2);
  // A grid smaller than the device: occupancy limited by the launched blocks.
  k.shared_bytes = 0;
  k.grid[0] = 66;  // half a block per SM
  EXPECT_EQ(kernel_occupancy(h100, k).achieved_percent, 6);  // 0.5 * 256 / 2048
  // Tiny launches (the emulated backend's 1x1 "kernels") and unknown devices.
  KernelShape one{{1, 1, 1}, {1, 1, 1}, 0, 0};
  EXPECT_EQ(kernel_occupancy(h100, one).achieved_percent, 0);
  EXPECT_EQ(kernel_occupancy(DeviceProperties{}, one).blocks_per_sm, 0.0);
}

#if CUDAKIT_WITH_CUDA && __has_include(<cupti_callbacks.h>)
#include <dlfcn.h>
#include <cupti_callbacks.h>

#include "backend/cuda/cupti.hpp"
#include "backend/cuda/cupti_api_calls.hpp"

// CUDAKIT_CUPTI_API picks how API records are taken; a typo is reported, not ignored.
TEST(ProfilerTraceCupti, ApiRecordingSettingIsParsedAndATypoReported) {
  std::string error;
  unsetenv("CUDAKIT_CUPTI_API");
  EXPECT_EQ(detail::cuda::api_recording_from_env(&error), detail::cuda::ApiRecording::activity);
  setenv("CUDAKIT_CUPTI_API", "callbacks", 1);
  EXPECT_EQ(detail::cuda::api_recording_from_env(&error), detail::cuda::ApiRecording::callbacks);
  EXPECT_TRUE(error.empty());
  setenv("CUDAKIT_CUPTI_API", "callback", 1);
  EXPECT_EQ(detail::cuda::api_recording_from_env(&error), detail::cuda::ApiRecording::activity);
  EXPECT_NE(error.find("activity (the default) or callbacks"), std::string::npos) << error;
  unsetenv("CUDAKIT_CUPTI_API");
}

// API records through CUPTI's callbacks: every kernel still has its launch, named and on the
// launching thread, before it ran. GPU only (scripts/gpu-check.sh).
TEST(ProfilerTraceGpu, ApiRecordsThroughCallbacksLinkEveryKernelToItsLaunch) {
  if (std::strcmp(detail::backend().name(), "cuda") != 0 || !have_device()) {
    GTEST_SKIP() << "needs the cuda backend and a GPU";
  }
  Tensor x = zeros({1024}, device_options());
  synchronize();
  setenv("CUDAKIT_CUPTI_API", "callbacks", 1);
  Trace t;
  unsetenv("CUDAKIT_CUPTI_API");
  for (int i = 0; i < 50; ++i) x = x + 1.0;
  t.stop();
  REQUIRE_DEVICE_RECORDS(t);
  const auto ev = t.events();
  std::map<std::uint64_t, const TraceEvent*> launch;
  for (const TraceEvent* l : with(ev, "cuda_driver")) launch[arg_as<std::uint64_t>(*l, "correlation")] = l;
  const auto kernels = with(ev, "kernel");
  ASSERT_GE(kernels.size(), 50u);
  for (const TraceEvent* k : kernels) {
    auto it = launch.find(arg_as<std::uint64_t>(*k, "correlation"));
    ASSERT_NE(it, launch.end()) << "kernel " << k->name << " without its launch";
    EXPECT_EQ(it->second->name.rfind("cuLaunchKernel", 0), 0u) << it->second->name;
    EXPECT_LE(it->second->ts_ns, k->ts_ns);
    EXPECT_GE(it->second->dur_ns, 0);
  }
}

// Another tool holding CUPTI's one subscription (what Nsight Systems or torch.profiler do):
// the trace degrades to cudakit's own events with a message saying why, and the next trace
// after the tool lets go has its device part again. GPU only (scripts/gpu-check.sh).
TEST(ProfilerTraceGpu, ForeignCuptiSubscriberDegradesWithAClearMessage) {
  if (std::strcmp(detail::backend().name(), "cuda") != 0 || !have_device()) {
    GTEST_SKIP() << "needs the cuda backend and a GPU";
  }
  const auto& api = detail::cuda::cupti();
  if (!api.loaded) GTEST_SKIP() << "CUPTI not loadable: " << api.reason;
  auto subscribe = reinterpret_cast<decltype(&cuptiSubscribe)>(api.symbol("cuptiSubscribe"));
  auto unsubscribe =
      reinterpret_cast<decltype(&cuptiUnsubscribe)>(api.symbol("cuptiUnsubscribe"));
  ASSERT_TRUE(subscribe && unsubscribe);
  Tensor x = zeros({1024}, device_options());
  synchronize();
  CUpti_SubscriberHandle foreign = nullptr;
  ASSERT_EQ(subscribe(&foreign, [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {},
                      nullptr),
            CUPTI_SUCCESS);
  {
    Trace t;
    nvtx::range_push("still recorded");
    x = x + 1.0;
    nvtx::range_pop();
    t.stop();
    ASSERT_FALSE(t.warnings().empty());
    EXPECT_NE(t.warnings().front().find("already in use"), std::string::npos)
        << t.warnings().front();
    const auto ev = t.events();
    EXPECT_TRUE(with(ev, "kernel").empty());
    EXPECT_EQ(with(ev, "user_annotation").size(), 1u);
  }
  unsubscribe(foreign);
  Trace t2;
  x = x + 1.0;
  t2.stop();
  EXPECT_TRUE(t2.warnings().empty()) << t2.warnings().front();
  EXPECT_FALSE(with(t2.events(), "kernel").empty());
  EXPECT_NE(t2.device_source().find("CUPTI"), std::string::npos);
}
#endif
