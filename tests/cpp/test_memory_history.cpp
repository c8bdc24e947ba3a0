// Allocation history (_record_memory_history) through the public API and the snapshot JSON:
// which events are recorded, which stacks they carry under each `context` setting, ring
// bounds, timestamps, and the quick-cache path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/plugin.hpp"
#include "cudakit/python_stacks.hpp"
#include "hang_watchdog.hpp"

using nlohmann::json;
using namespace cudakit;

namespace {

struct HistoryOff {
  ~HistoryOff() { record_memory_history(std::nullopt); }
};

json traces() {
  json snap = json::parse(memory_snapshot_json());
  return snap["device_traces"].empty() ? json::array() : snap["device_traces"][0];
}

// alloc / free_* entries of one address (segment_* entries may share it).
std::vector<json> entries_for(const json& tr, std::uintptr_t addr) {
  std::vector<json> out;
  for (const json& e : tr) {
    const std::string action = e["action"];
    if (e["addr"].get<std::uintptr_t>() == addr && action.rfind("segment", 0) != 0) out.push_back(e);
  }
  return out;
}

std::vector<std::string> names(const json& e) {
  std::vector<std::string> out;
  for (const json& f : e["frames"]) out.push_back(f["name"].get<std::string>());
  return out;
}

bool mentions(const std::vector<std::string>& frames, const std::string& what) {
  for (const auto& f : frames)
    if (f.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(MemoryHistory, AllContextRecordsAllocAndFreeStacks) {
  HistoryOff off;
  record_memory_history("all", "all", "cpp", 1000);
  void* p = caching_allocator_alloc(3 << 20);
  caching_allocator_delete(p);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
  ASSERT_EQ(es.size(), 3u);
  EXPECT_EQ(es[0]["action"], "alloc");
  EXPECT_EQ(es[1]["action"], "free_requested");
  EXPECT_EQ(es[2]["action"], "free_completed");
  EXPECT_EQ(es[0]["size"].get<std::size_t>(), std::size_t(3) << 20);
  const auto alloc_frames = names(es[0]), free_frames = names(es[1]);
  ASSERT_FALSE(alloc_frames.empty());
  ASSERT_FALSE(free_frames.empty());
  // The walk starts at the allocator's caller (the public entry points; caching_allocator_alloc
  // and raw_alloc may be tail calls, hence native_alloc) and reaches this test (exported
  // symbols).
  EXPECT_TRUE(mentions(alloc_frames, "native_alloc") || mentions(alloc_frames, "raw_alloc") ||
              mentions(alloc_frames, "caching_allocator_alloc"))
      << alloc_frames[0];
  EXPECT_TRUE(mentions(free_frames, "caching_allocator_delete")) << free_frames[0];
  EXPECT_TRUE(mentions(alloc_frames, "AllContextRecordsAllocAndFreeStacks"));
  EXPECT_FALSE(mentions(alloc_frames, "DeviceAllocator::malloc"));
  EXPECT_EQ(names(es[2]), free_frames);  // an immediate free completes with the free's stack
  // Each event has its own time (a free is not stamped with its allocation's time).
  const double t0 = es[0]["time_us"].get<double>(), t1 = es[1]["time_us"].get<double>();
  EXPECT_GE(t1, t0);
  EXPECT_GT(t0, 1.6e15);  // µs since the epoch (after 2020)
}

TEST(MemoryHistory, AllocContextReusesTheAllocationStackForFrees) {
  HistoryOff off;
  record_memory_history("all", "alloc", "cpp", 1000);
  void* p = caching_allocator_alloc(5 << 20);
  caching_allocator_delete(p);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
  ASSERT_EQ(es.size(), 3u);
  EXPECT_FALSE(names(es[0]).empty());
  EXPECT_EQ(names(es[1]), names(es[0]));
  EXPECT_EQ(names(es[2]), names(es[0]));
}

TEST(MemoryHistory, StateModeKeepsStacksOfLiveBlocksOnly) {
  HistoryOff off;
  record_memory_history("state", "state", "cpp", 1000);
  void* p = caching_allocator_alloc(1 << 20);
  json snap = json::parse(memory_snapshot_json());
  for (const json& dev : snap["device_traces"]) EXPECT_TRUE(dev.empty());
  bool found = false;
  for (const json& seg : snap["segments"]) {
    for (const json& b : seg["blocks"]) {
      if (b["address"].get<std::uintptr_t>() != reinterpret_cast<std::uintptr_t>(p)) continue;
      found = true;
      EXPECT_EQ(b["state"], "active_allocated");
      EXPECT_FALSE(b["frames"].empty());
    }
  }
  EXPECT_TRUE(found);
  caching_allocator_delete(p);
}

// Two call sites, each allocating a new segment (extern and not inlined, so they are frames
// of their own with names the symbolizer finds).
__attribute__((noinline)) void* history_site_alpha(std::size_t n) {
  void* p = caching_allocator_alloc(n);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return p;
}
__attribute__((noinline)) void* history_site_beta(std::size_t n) {
  void* p = caching_allocator_alloc(n);
  asm volatile("" ::: "memory");
  return p;
}

TEST(MemoryHistory, StateModeWithSegmentEventsKeepsEachBlocksOwnStack) {
  // enabled="state" records no trace, but with context "all" each segment_alloc still looks
  // at the call's stack: the record it adopted went back to the pool while the alloc that
  // followed kept it on the block, and the next call site's stack overwrote it.
  HistoryOff off;
  empty_cache();
  record_memory_history("state", "all", "cpp", 1000);
  void* a = history_site_alpha(7 << 20);
  void* b = history_site_beta(9 << 20);
  json snap = json::parse(memory_snapshot_json());
  std::vector<std::string> fa, fb;
  for (const json& seg : snap["segments"]) {
    for (const json& blk : seg["blocks"]) {
      const auto addr = blk["address"].get<std::uintptr_t>();
      if (addr == reinterpret_cast<std::uintptr_t>(a)) fa = names(blk);
      if (addr == reinterpret_cast<std::uintptr_t>(b)) fb = names(blk);
    }
  }
  EXPECT_TRUE(mentions(fa, "history_site_alpha")) << ::testing::PrintToString(fa);
  EXPECT_FALSE(mentions(fa, "history_site_beta")) << ::testing::PrintToString(fa);
  EXPECT_TRUE(mentions(fb, "history_site_beta")) << ::testing::PrintToString(fb);
  caching_allocator_delete(a);
  caching_allocator_delete(b);
}

// Call sites of their own, one per K (the symbolizer names them "history_site<K>(...)").
template <int K>
__attribute__((noinline)) void* history_site(std::size_t n) {
  void* p = caching_allocator_alloc(n);
  asm volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) void history_free_site(void* p) {
  caching_allocator_delete(p);
  asm volatile("" ::: "memory");
}

TEST(MemoryHistory, ReenablingKeepsCachedStacksConsistent) {
  // Re-enabling history clears the ring, but the recorder's stack cache (the intern table and
  // its most-recently-used entries) outlives it. A free whose stack was cached while only the
  // old ring referenced it was handed out again before the ring was cleared: the clear
  // returned the record to the pool while the new entry still pointed at it, and a later new
  // stack (another call site) overwrote it, so the free entries named that call site. A record
  // on the pool twice also made its free list a cycle (a hang, hence the watchdog).
  cudakit::testing::HangWatchdog watchdog(120, "re-enabling allocation history");
  HistoryOff off;
  constexpr int kRounds = 3, kPerRound = 3;
  void* (*const sites[kRounds * kPerRound])(std::size_t) = {
      history_site<0>, history_site<1>, history_site<2>, history_site<3>, history_site<4>,
      history_site<5>, history_site<6>, history_site<7>, history_site<8>};
  auto site_name = [](int k) { return "history_site<" + std::to_string(k) + ">"; };
  std::vector<void*> live;
  std::map<std::uintptr_t, int> site_of;  // live block -> the site that allocated it
  for (int round = 0; round < kRounds; ++round) {
    // Off and on again; the middle round also changes the settings (a smaller ring).
    record_memory_history(std::nullopt);
    record_memory_history("all", "all", "cpp", round == 1 ? 64 : 1000);
    // One call instruction per helper, so every round's frees have the same stack: the first
    // event after re-enabling frees with the stack that the previous round cached.
    for (void* p : live) history_free_site(p);
    live.clear();
    site_of.clear();
    // New call sites, each a new stack record (taken from the pool, where the bug left the
    // free's record).
    for (int i = 0; i < kPerRound; ++i) {
      const int k = round * kPerRound + i;
      live.push_back(sites[k](4096 * (i + 1)));
      site_of[reinterpret_cast<std::uintptr_t>(live.back())] = k;
    }
  }
  const json tr = traces();
  int allocs = 0, frees = 0;
  for (const json& e : tr) {
    const std::string action = e["action"];
    const auto frames = names(e);
    if (action == "alloc") {
      ++allocs;
      const auto it = site_of.find(e["addr"].get<std::uintptr_t>());
      ASSERT_NE(it, site_of.end()) << "an alloc of the last round only";
      EXPECT_TRUE(mentions(frames, site_name(it->second))) << ::testing::PrintToString(frames);
      EXPECT_FALSE(mentions(frames, "history_free_site")) << ::testing::PrintToString(frames);
    } else if (action == "free_requested" || action == "free_completed") {
      ++frees;
      EXPECT_TRUE(mentions(frames, "history_free_site")) << ::testing::PrintToString(frames);
      EXPECT_FALSE(mentions(frames, "history_site<")) << ::testing::PrintToString(frames);
    }
  }
  EXPECT_EQ(allocs, kPerRound);
  EXPECT_EQ(frees, 2 * kPerRound);  // the previous round's blocks, requested and completed
  // The live blocks show their own allocation stacks too.
  const json snap = json::parse(memory_snapshot_json());
  int blocks = 0;
  for (const json& seg : snap["segments"]) {
    for (const json& blk : seg["blocks"]) {
      const auto it = site_of.find(blk["address"].get<std::uintptr_t>());
      if (it == site_of.end()) continue;
      ++blocks;
      EXPECT_TRUE(mentions(names(blk), site_name(it->second)))
          << ::testing::PrintToString(names(blk));
    }
  }
  EXPECT_EQ(blocks, kPerRound);
  for (void* p : live) caching_allocator_delete(p);
  // And recording still works after all that.
  record_memory_history("all", "all", "cpp", 1000, /*clear_history=*/true);
  void* last = history_site<0>(4096);
  history_free_site(last);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(last));
  ASSERT_EQ(es.size(), 3u);
  EXPECT_TRUE(mentions(names(es[0]), "history_site<0>"));
  EXPECT_TRUE(mentions(names(es[1]), "history_free_site"));
}

TEST(MemoryHistory, RingKeepsTheNewestEntriesAndReenableClears) {
  HistoryOff off;
  record_memory_history("all", "all", "cpp", 10);
  std::vector<void*> ptrs;
  for (int i = 0; i < 50; ++i) {
    void* p = caching_allocator_alloc(4096);  // same size: the quick-cache path
    ptrs.push_back(p);
    caching_allocator_delete(p);
  }
  json tr = traces();
  ASSERT_EQ(tr.size(), 10u);
  EXPECT_EQ(tr.back()["action"], "free_completed");
  EXPECT_EQ(tr.back()["addr"].get<std::uintptr_t>(), reinterpret_cast<std::uintptr_t>(ptrs.back()));
  double prev = 0;
  for (const json& e : tr) {  // oldest first, never going back in time
    EXPECT_GE(e["time_us"].get<double>(), prev);
    prev = e["time_us"].get<double>();
  }
  // As torch: new settings while recording keep the trace, clear_history drops it.
  record_memory_history("all", "all", "cpp", 10);
  EXPECT_EQ(traces().size(), 10u);
  record_memory_history("all", "all", "cpp", 10, /*clear_history=*/true);
  EXPECT_TRUE(traces().empty());
}

TEST(MemoryHistory, RingOfFreePairsKeepsExactlyTheNewestEntries) {
  // A free's free_requested and free_completed share one ring slot: the snapshot expands
  // it and still gives exactly the newest max_entries entries, a pair cut in half included.
  HistoryOff off;
  for (const std::size_t cap : {3, 4}) {
    record_memory_history("all", "all", "cpp", cap);
    void* last = nullptr;
    for (int i = 0; i < 20; ++i) {
      last = caching_allocator_alloc(4096);
      caching_allocator_delete(last);
    }
    const json tr = traces();
    ASSERT_EQ(tr.size(), cap);
    std::vector<std::string> actions;
    for (const json& e : tr) actions.push_back(e["action"]);
    const std::vector<std::string> want =
        cap == 3 ? std::vector<std::string>{"alloc", "free_requested", "free_completed"}
                 : std::vector<std::string>{"free_completed", "alloc", "free_requested",
                                            "free_completed"};
    EXPECT_EQ(actions, want);
    for (std::size_t i = cap - 3; i < cap; ++i)
      EXPECT_EQ(tr[i]["addr"].get<std::uintptr_t>(), reinterpret_cast<std::uintptr_t>(last));
    EXPECT_EQ(tr[cap - 1]["time_us"], tr[cap - 2]["time_us"]);  // one call, one time
    EXPECT_EQ(names(tr[cap - 1]), names(tr[cap - 2]));
  }
}

TEST(MemoryHistory, EveryPairIsRecordedOnTheQuickPath) {
  HistoryOff off;
  record_memory_history("all", "", "cpp", 100000);
  for (int i = 0; i < 200; ++i) caching_allocator_delete(caching_allocator_alloc(8192));
  json tr = traces();
  ASSERT_EQ(tr.size(), 600u);
  for (const json& e : tr) EXPECT_TRUE(e["frames"].empty());  // context None: no stacks
}

TEST(MemoryHistory, OffRecordsNothingAndBadArgumentsAreRejected) {
  record_memory_history("all", "all", "cpp", 100);
  record_memory_history(std::nullopt);
  const std::size_t before = traces().size();
  caching_allocator_delete(caching_allocator_alloc(1024));
  EXPECT_EQ(traces().size(), before);
  EXPECT_THROW(record_memory_history("sometimes"), ValueError);
  EXPECT_THROW(record_memory_history("all", "everything"), ValueError);
  EXPECT_THROW(record_memory_history("all", "all", "java"), ValueError);
}

TEST(MemoryHistory, ThreadsRecordWhileSnapshotsAreTaken) {
  HistoryOff off;
  record_memory_history("all", "all", "cpp", 5000);
  constexpr int kThreads = 6;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &done] {
      std::vector<void*> live;
      for (int i = 0; i < 3000; ++i) {
        live.push_back(caching_allocator_alloc(std::size_t(512) << ((i + t) % 12)));
        if (live.size() > 8) {
          caching_allocator_delete(live.front());
          live.erase(live.begin());
        }
      }
      for (void* p : live) caching_allocator_delete(p);
      done.fetch_add(1);
    });
  }
  // Snapshots race with the recording threads until they are all done.
  int snapshots = 0;
  while (done.load() < kThreads || snapshots < 3) {
    json tr = traces();
    EXPECT_LE(tr.size(), 5000u);
    ++snapshots;
  }
  for (auto& th : threads) th.join();
  json tr = traces();
  EXPECT_EQ(tr.size(), 5000u);  // 6 x 3000 pairs overflow the ring
  for (const json& e : tr) {
    const std::string a = e["action"];
    if (a == "alloc" || a == "free_requested") EXPECT_FALSE(e["frames"].empty()) << a;
  }
}

// ---- Python frames of a capture adopted twice in one allocator call (review of histcost) ----

namespace {
char g_code[1];  // a fake interpreter: every allocator call gets a Python stack of its own
std::atomic<int> g_py_calls{0};
int fake_capture(PyFrameRef* out, int max, std::uint64_t*) {
  out[0] = PyFrameRef{g_code, g_py_calls++};
  return 1;
}
void fake_symbolize(const PyFrameRef& f, std::string& file, int& line, std::string& name) {
  file = "fake.py";
  line = f.lasti;
  name = "pyframe_" + std::to_string(f.lasti);
}
struct FakePythonStacks {
  FakePythonStacks() { set_python_stack_hooks(fake_capture, fake_symbolize); }
  ~FakePythonStacks() { set_python_stack_hooks(nullptr, nullptr); }
};
bool block_has_python_frames(const json& snap, void* p) {
  for (const json& seg : snap["segments"])
    for (const json& blk : seg["blocks"])
      if (blk["address"].get<std::uintptr_t>() == reinterpret_cast<std::uintptr_t>(p))
        return mentions(names(blk), "pyframe_");
  ADD_FAILURE() << "block not in the snapshot";
  return false;
}
}  // namespace

// A new segment: segment_alloc interns the call's stack, its ring overwrite pools a record,
// and the alloc event adopts the capture again; it kept the C++ frames only.
TEST(MemoryHistory, ReadoptionWithinACallKeepsPythonFrames) {
  HistoryOff off;
  FakePythonStacks py;
  record_memory_history("all", "all", "all", 2);
  for (int i = 0; i < 6; ++i) {
    void* p = caching_allocator_alloc(64 << 20);
    const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
    ASSERT_FALSE(es.empty());
    EXPECT_TRUE(mentions(names(es.back()), "pyframe_")) << "iteration " << i;
    EXPECT_TRUE(block_has_python_frames(json::parse(memory_snapshot_json()), p)) << i;
    caching_allocator_delete(p);
    empty_cache();  // the next alloc makes a new segment again
  }
}

// The slow-path free: free_completed must show the frames of its free_requested.
TEST(MemoryHistory, FreeCompletedKeepsThePythonFramesOfItsRequest) {
  HistoryOff off;
  set_allocator_settings("quick_cache:False");
  FakePythonStacks py;
  record_memory_history("all", "all", "all", 2);
  int bad = 0;
  for (int i = 0; i < 8; ++i) {
    void* p = caching_allocator_alloc(4096);
    caching_allocator_delete(p);
    const json tr = traces();
    ASSERT_EQ(tr.size(), 2u);
    EXPECT_EQ(tr[0]["action"], "free_requested");
    EXPECT_EQ(tr[1]["action"], "free_completed");
    if (names(tr[0]) != names(tr[1]) || !mentions(names(tr[1]), "pyframe_")) ++bad;
  }
  EXPECT_EQ(bad, 0);
  set_allocator_settings("quick_cache:True");
}

// Trace off ("state"): segment_alloc's record is discarded, the block's stack adopted again.
TEST(MemoryHistory, StateModeBlockOnNewSegmentKeepsPythonFrames) {
  HistoryOff off;
  FakePythonStacks py;
  record_memory_history("state", "alloc", "all", 100);
  empty_cache();
  void* p = caching_allocator_alloc(64 << 20);
  EXPECT_TRUE(block_has_python_frames(json::parse(memory_snapshot_json()), p));
  caching_allocator_delete(p);
}

// PyStackHook's key (issue 31): equal nonzero keys stand for equal frames, so the recorder
// compares keys; a new key for frames it holds already (the hook forgot and renamed them), or
// no key, still finds the right stack.
namespace {
int g_keyed_lasti = 0;
std::uint64_t g_keyed_key = 0;
int keyed_capture(PyFrameRef* out, int max, std::uint64_t* key) {
  out[0] = PyFrameRef{g_code, g_keyed_lasti};
  *key = g_keyed_key;
  return 1;
}
}  // namespace

TEST(MemoryHistory, PythonStackKeysNameTheirFrames) {
  HistoryOff off;
  set_python_stack_hooks(keyed_capture, fake_symbolize);
  record_memory_history("all", "all", "python", 100);
  const std::pair<int, std::uint64_t> steps[] = {{1, 7}, {1, 7}, {2, 8}, {2, 9}, {2, 9}, {1, 0}, {1, 10}};
  for (const auto& [lasti, key] : steps) {
    g_keyed_lasti = lasti;
    g_keyed_key = key;
    void* p = caching_allocator_alloc(4096);
    caching_allocator_delete(p);
    const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
    ASSERT_GE(es.size(), 3u);  // alloc, free_requested, free_completed (and earlier pairs')
    const std::vector<std::string> want{"pyframe_" + std::to_string(lasti)};
    for (std::size_t i = es.size() - 3; i < es.size(); ++i)
      EXPECT_EQ(names(es[i]), want) << "lasti " << lasti << " key " << key;
  }
  set_python_stack_hooks(nullptr, nullptr);
}

// torch's recordHistory (test_memory_plots_history_context): switching the context off and on
// while recording keeps what was recorded, with each entry's stack as it was recorded; off
// drops the trace, and the next recording starts empty.
TEST(MemoryHistory, SettingsChangedWhileRecordingKeepTheTraceAndOffDropsIt) {
  HistoryOff off;
  record_memory_history(std::nullopt);
  record_memory_history("all", "all", "cpp", 1000);
  void* first = history_site<0>(4096);
  record_memory_history("all", "", "cpp", 1000);  // context None
  void* second = history_site<1>(8192);
  record_memory_history("all", "all", "cpp", 1000);
  void* third = history_site<2>(12288);
  const json tr = traces();
  const auto e1 = entries_for(tr, reinterpret_cast<std::uintptr_t>(first));
  const auto e2 = entries_for(tr, reinterpret_cast<std::uintptr_t>(second));
  const auto e3 = entries_for(tr, reinterpret_cast<std::uintptr_t>(third));
  ASSERT_EQ(e1.size(), 1u);
  ASSERT_EQ(e2.size(), 1u);
  ASSERT_EQ(e3.size(), 1u);
  EXPECT_TRUE(mentions(names(e1[0]), "history_site<0>")) << ::testing::PrintToString(names(e1[0]));
  EXPECT_TRUE(names(e2[0]).empty());
  EXPECT_TRUE(mentions(names(e3[0]), "history_site<2>"));
  for (void* p : {first, second, third}) caching_allocator_delete(p);
  record_memory_history(std::nullopt);
  EXPECT_TRUE(traces().empty());
  record_memory_history("all", "all", "cpp", 1000);
  EXPECT_TRUE(traces().empty());
  void* p = caching_allocator_alloc(4096);
  caching_allocator_delete(p);
  EXPECT_EQ(entries_for(traces(), reinterpret_cast<std::uintptr_t>(p)).size(), 3u);
}

// context "state": stacks are kept for live blocks only; no trace entry shows one (torch's
// test_memory_plots_free_stack: the allocating function is not in the snapshot once freed).
TEST(MemoryHistory, StateContextTraceEntriesCarryNoStacks) {
  HistoryOff off;
  record_memory_history("all", "state", "cpp", 1000);
  void* p = history_site<3>(4096);
  caching_allocator_delete(p);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
  ASSERT_EQ(es.size(), 3u);
  for (const json& e : es) EXPECT_TRUE(names(e).empty()) << e.dump();
}

__attribute__((noinline)) void history_empty_cache_site() {
  empty_cache();
  asm volatile("" ::: "memory");
}

// context "all": the segment_free entries of empty_cache() show the call's own stack
// (torch's test_memory_plots_free_segment_stack); with "alloc" they do not.
TEST(MemoryHistory, EmptyCacheSegmentFreesShowTheCallersStackWithContextAll) {
  HistoryOff off;
  for (const char* context : {"all", "alloc"}) {
    empty_cache();
    record_memory_history("all", context, "cpp", 1000, /*clear_history=*/true);
    void* p = caching_allocator_alloc(3 << 20);
    caching_allocator_delete(p);
    history_empty_cache_site();
    int segment_frees = 0, with_site = 0;
    for (const json& e : traces()) {
      // segment_unmap: expandable segments give pages back instead of segments
      if (e["action"] != "segment_free" && e["action"] != "segment_unmap") continue;
      ++segment_frees;
      with_site += mentions(names(e), "history_empty_cache_site");
    }
    EXPECT_GE(segment_frees, 1) << context;
    EXPECT_EQ(with_site, std::string(context) == "all" ? segment_frees : 0) << context;
  }
}

// Built without frame pointers, as libtorch is: the frame-pointer chain skips them.
__attribute__((noinline, optimize("omit-frame-pointer"))) void* no_frame_pointer_inner(
    std::size_t n) {
  void* p = torch_allocator_hooks().malloc(n, 0, nullptr);
  asm volatile("" ::: "memory");
  return p;
}
__attribute__((noinline, optimize("omit-frame-pointer"))) void* no_frame_pointer_outer(
    std::size_t n) {
  void* p = no_frame_pointer_inner(n);
  asm volatile("" ::: "memory");
  return p;
}

// torch's test_memory_plots with stacks="all" looks for its own C++ frames (at::...::rand)
// in the snapshot: allocations through the plug-in hooks unwind with the DWARF tables, so the
// callers' frames are there although they keep no frame pointer.
TEST(MemoryHistory, PluginAllocationsUnwindThroughCallersWithoutFramePointers) {
  HistoryOff off;
  record_memory_history("all", "all", "cpp", 1000, /*clear_history=*/true);
  void* p = no_frame_pointer_outer(4096);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
  ASSERT_GE(es.size(), 1u);
  const auto frames = names(es[0]);
  EXPECT_TRUE(mentions(frames, "no_frame_pointer_inner")) << ::testing::PrintToString(frames);
  EXPECT_TRUE(mentions(frames, "no_frame_pointer_outer")) << ::testing::PrintToString(frames);
  EXPECT_TRUE(mentions(frames, "PluginAllocationsUnwindThroughCallersWithoutFramePointers"))
      << ::testing::PrintToString(frames);
  EXPECT_FALSE(mentions(frames, "DeviceAllocator::malloc")) << ::testing::PrintToString(frames);
  torch_allocator_hooks().free(p, 4096, 0, nullptr);
}

namespace {
// Internal linkage: not in the dynamic symbol table even with -rdynamic (ENABLE_EXPORTS), as
// every function of an executable linked without it.
// (Its body differs from history_site_alpha's, or identical code folding merges the two.)
__attribute__((noinline)) void* hidden_history_site(std::size_t n) {
  void* p = caching_allocator_alloc(n + 8);
  asm volatile("" ::: "memory");
  return p;
}

bool tool_answers(const char* command) { return std::system(command) == 0; }
}  // namespace

// Issue 30: C++ stacks name functions that have no dynamic symbol (the object's .symtab), and
// carry file and line where the object has line tables and binutils' addr2line is installed.
TEST(MemoryHistory, FunctionsWithoutDynamicSymbolsAreNamedWithFileAndLine) {
  HistoryOff off;
  record_memory_history("all", "all", "cpp", 1000, /*clear_history=*/true);
  void* p = hidden_history_site(4096);
  const auto es = entries_for(traces(), reinterpret_cast<std::uintptr_t>(p));
  ASSERT_GE(es.size(), 1u);
  const json* site = nullptr;
  for (const json& f : es[0]["frames"])
    if (f["name"].get<std::string>().find("hidden_history_site") != std::string::npos) site = &f;
  ASSERT_NE(site, nullptr) << es[0]["frames"].dump();
  const bool lines = tool_answers("command -v addr2line > /dev/null 2>&1") &&
                     tool_answers("readelf -S /proc/$PPID/exe 2>/dev/null | grep -q debug_line");
  if (lines) {
    EXPECT_NE((*site)["filename"].get<std::string>().find("test_memory_history.cpp"),
              std::string::npos) << site->dump();
    EXPECT_GT((*site)["line"].get<int>(), 0) << site->dump();
  } else {
    EXPECT_EQ((*site)["line"].get<int>(), 0) << site->dump();
  }
  caching_allocator_delete(p);
}
