// cudakit::nvtx: torch's depth and id semantics, domains, categories, colours, payloads,
// ScopedRange, and (when NVTX_INJECTION64_PATH names the recorder library) what a tool
// receives.
//
// Built three ways (tests/CMakeLists.txt):
//   cpp.test_nvtx       against libcudakit, no tool attached;
//   cpp.test_nvtx.tool  the same binary with the recorder injected (the Tool.* tests);
//   cpp.test_nvtx_noop  against src/nvtx compiled without NVTX headers (CUDAKIT_WITH_NVTX=0),
//                       as on a machine without them: same bookkeeping, nothing forwarded.
#include "cudakit/nvtx.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cudakit/error.hpp"

#if CUDAKIT_TEST_WITH_NVTX
#include <dlfcn.h>
#include <nvtx3/nvtx3.hpp>

#include "recorder.h"
#endif

namespace nv = cudakit::nvtx;

namespace {

const char* injection_path() { return std::getenv("NVTX_INJECTION64_PATH"); }

// Leaves this thread with no open range in the domains the tests use.
void drain(nv::Domain& d = nv::Domain::global()) {
  while (nv::depth(d) > 0) {
    if (&d == &nv::Domain::global()) {
      nv::range_pop();
    } else {
      nv::range_pop(d);
    }
  }
}

TEST(NvtxDepth, PushReturnsDepthOfRangeStartedPopReturnsDepthOfRangeEnded) {
  drain();
  EXPECT_EQ(nv::range_push("a"), 0);
  EXPECT_EQ(nv::range_push(std::string("b")), 1);
  EXPECT_EQ(nv::range_push("c"), 2);
  EXPECT_EQ(nv::depth(), 3);
  EXPECT_EQ(nv::range_pop(), 2);
  EXPECT_EQ(nv::range_pop(), 1);
  EXPECT_EQ(nv::range_pop(), 0);
  EXPECT_EQ(nv::depth(), 0);
}

TEST(NvtxDepth, PopWithNothingPushedReturnsMinusOneAndStaysAtZero) {
  drain();
  EXPECT_EQ(nv::range_pop(), -1);
  EXPECT_EQ(nv::range_pop(), -1);
  EXPECT_EQ(nv::depth(), 0);
  EXPECT_EQ(nv::range_push("after"), 0);  // an unbalanced pop does not go negative
  EXPECT_EQ(nv::range_pop(), 0);
}

TEST(NvtxDepth, NullMessageIsAccepted) {
  drain();
  EXPECT_EQ(nv::range_push(static_cast<const char*>(nullptr)), 0);
  EXPECT_EQ(nv::range_pop(), 0);
  nv::mark(static_cast<const char*>(nullptr));
}

TEST(NvtxDepth, EachThreadHasItsOwnStack) {
  drain();
  EXPECT_EQ(nv::range_push("main"), 0);
  std::vector<int> seen(8, -100);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &seen] {
      int first = nv::range_push("worker");
      int second = nv::range_push("inner");
      nv::range_pop();
      nv::range_pop();
      seen[t] = first * 10 + second;  // 0 and 1 on every thread, whatever main holds
      EXPECT_EQ(nv::range_pop(), -1);
    });
  }
  for (auto& th : threads) th.join();
  for (int v : seen) EXPECT_EQ(v, 1);
  EXPECT_EQ(nv::range_pop(), 0);
}

TEST(NvtxDepth, DomainsHaveSeparateStacks) {
  nv::Domain& a = nv::Domain::get("cudakit.test.a");
  nv::Domain& b = nv::Domain::get("cudakit.test.b");
  drain();
  drain(a);
  drain(b);
  EXPECT_EQ(nv::range_push("global"), 0);
  EXPECT_EQ(nv::range_push({.message = "a0"}, a), 0);
  EXPECT_EQ(nv::range_push({.message = "a1"}, a), 1);
  EXPECT_EQ(nv::range_push({.message = "b0"}, b), 0);
  EXPECT_EQ(nv::depth(a), 2);
  EXPECT_EQ(nv::depth(b), 1);
  EXPECT_EQ(nv::depth(), 1);
  EXPECT_EQ(nv::range_pop(a), 1);
  EXPECT_EQ(nv::range_pop(b), 0);
  EXPECT_EQ(nv::range_pop(b), -1);
  EXPECT_EQ(nv::range_pop(a), 0);
  EXPECT_EQ(nv::range_pop(), 0);
}

TEST(NvtxDepth, ManyDomainsPastTheFastSlotsStillCountCorrectly) {
  // 40 domains: some past the fixed per-thread array (32 slots), on the overflow path.
  std::vector<nv::Domain*> domains;
  for (int i = 0; i < 40; ++i) {
    domains.push_back(&nv::Domain::get("cudakit.test.many." + std::to_string(i)));
  }
  for (nv::Domain* d : domains) {
    EXPECT_EQ(nv::range_push({.message = "x"}, *d), 0);
    EXPECT_EQ(nv::range_push({.message = "y"}, *d), 1);
  }
  for (nv::Domain* d : domains) {
    EXPECT_EQ(nv::depth(*d), 2);
    EXPECT_EQ(nv::range_pop(*d), 1);
    EXPECT_EQ(nv::range_pop(*d), 0);
  }
}

TEST(NvtxScopedRange, NestsAndRestoresDepth) {
  drain();
  {
    nv::ScopedRange outer("outer");
    EXPECT_EQ(outer.depth(), 0);
    {
      nv::ScopedRange inner(std::string("inner"));
      EXPECT_EQ(inner.depth(), 1);
      EXPECT_EQ(nv::depth(), 2);
    }
    EXPECT_EQ(nv::depth(), 1);
  }
  EXPECT_EQ(nv::depth(), 0);

  nv::Domain& d = nv::Domain::cudakit();
  drain(d);
  {
    nv::ScopedRange r({.message = "attr", .color = nv::Color::rgb(1, 2, 3), .category = 7,
                       .payload = 2.5},
                      d);
    EXPECT_EQ(r.depth(), 0);
    EXPECT_EQ(nv::depth(d), 1);
    EXPECT_EQ(nv::depth(), 0);  // the default domain is untouched
  }
  EXPECT_EQ(nv::depth(d), 0);
}

TEST(NvtxRangeStartEnd, IdsAreNonZeroAndUniqueAcrossThreads) {
  constexpr int kThreads = 8, kPerThread = 2000;
  std::vector<std::vector<std::uint64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ids] {
      for (int i = 0; i < kPerThread; ++i) ids[t].push_back(nv::range_start("r"));
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::uint64_t> all;
  for (auto& v : ids) {
    for (std::uint64_t id : v) {
      EXPECT_NE(id, 0u);
      all.insert(id);
    }
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
  // End them on threads other than the ones that started them.
  std::vector<std::thread> enders;
  for (int t = 0; t < kThreads; ++t) {
    enders.emplace_back([&ids, t] {
      for (std::uint64_t id : ids[(t + 1) % kThreads]) nv::range_end(id);
    });
  }
  for (auto& th : enders) th.join();
}

TEST(NvtxRangeStartEnd, StartDoesNotChangePushDepth) {
  drain();
  std::uint64_t id = nv::range_start({.message = "s", .color = nv::Color::parse("blue")},
                                     nv::Domain::cudakit());
  EXPECT_EQ(nv::depth(), 0);
  EXPECT_EQ(nv::depth(nv::Domain::cudakit()), 0);
  nv::range_end(id, nv::Domain::cudakit());
}

TEST(NvtxColor, ParsesNamesAndHex) {
  EXPECT_EQ(nv::Color::parse("red").argb, 0xFFFF0000u);
  EXPECT_EQ(nv::Color::parse("Green").argb, 0xFF008000u);
  EXPECT_EQ(nv::Color::parse("GREY"), nv::Color::parse("gray"));
  EXPECT_EQ(nv::Color::parse("#123abc").argb, 0xFF123ABCu);
  EXPECT_EQ(nv::Color::parse("#80123ABC").argb, 0x80123ABCu);
  EXPECT_EQ(nv::Color::rgb(0x12, 0x34, 0x56).argb, 0xFF123456u);
  EXPECT_FALSE(nv::Color{}.is_set());
  EXPECT_TRUE(nv::Color::parse("black").is_set());  // opaque black is a colour, not "none"
}

TEST(NvtxColor, BadTextIsAValueErrorNamingItAndTheChoices) {
  for (const char* bad : {"", "chartreuse-ish", "#12345", "#1234567", "#GGGGGG", "#"}) {
    try {
      nv::Color::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const cudakit::ValueError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("#RRGGBB"), std::string::npos) << what;
      EXPECT_NE(what.find("red"), std::string::npos) << what;
    }
  }
}

TEST(NvtxPayload, KindsFollowTheArgumentType) {
  EXPECT_EQ(nv::Payload().kind(), nv::Payload::Kind::none);
  EXPECT_EQ(nv::Payload(-3).kind(), nv::Payload::Kind::int64);
  EXPECT_EQ(nv::Payload(-3).as_int64(), -3);
  EXPECT_EQ(nv::Payload(std::uint64_t{1} << 63).kind(), nv::Payload::Kind::uint64);
  EXPECT_EQ(nv::Payload(std::uint64_t{1} << 63).as_uint64(), std::uint64_t{1} << 63);
  EXPECT_EQ(nv::Payload(0.25).kind(), nv::Payload::Kind::float64);
  EXPECT_EQ(nv::Payload(0.25).as_double(), 0.25);
  static_assert(!std::is_constructible_v<nv::Payload, bool>);
}

TEST(NvtxDomain, OneObjectPerNameAndFixedSpecialDomains) {
  EXPECT_EQ(&nv::Domain::get("cudakit"), &nv::Domain::cudakit());
  EXPECT_EQ(&nv::Domain::get("cudakit.test.same"), &nv::Domain::get("cudakit.test.same"));
  EXPECT_NE(&nv::Domain::get("cudakit.test.same"), &nv::Domain::get("cudakit.test.other"));
  EXPECT_EQ(nv::Domain::global().name(), "");
  EXPECT_EQ(nv::Domain::global().handle(), nullptr);
  EXPECT_EQ(nv::Domain::cudakit().name(), "cudakit");
  EXPECT_STREQ(nv::nvtx3_domain::name, "cudakit");
  EXPECT_THROW(nv::Domain::get(""), cudakit::ValueError);
}

TEST(NvtxDomain, CategoriesGetStableIdsAndNamedIdsAreKept) {
  nv::Domain& d = nv::Domain::get("cudakit.test.categories");
  std::uint32_t io = d.category("io");
  std::uint32_t net = d.category("net");
  EXPECT_GE(io, 1u);
  EXPECT_NE(io, net);
  EXPECT_EQ(d.category("io"), io);
  d.name_category(42, "gpu");
  EXPECT_EQ(d.category("gpu"), 42u);
  d.name_category(io + 100, "io");  // renaming moves the name to the new id
  EXPECT_EQ(d.category("io"), io + 100);
  std::uint32_t next = d.category("disk");
  EXPECT_NE(next, 42u);  // auto ids skip ids named explicitly
  EXPECT_NE(next, io + 100);
  EXPECT_THROW(d.category(""), cudakit::ValueError);
  EXPECT_THROW(d.name_category(0, "zero"), cudakit::ValueError);
  EXPECT_THROW(d.name_category(5, ""), cudakit::ValueError);
  // The default domain has categories too (as nvtxNameCategoryA).
  EXPECT_GE(nv::Domain::global().category("cudakit.test.global"), 1u);
}

TEST(NvtxDomain, ConcurrentFirstUseCreatesOneObjectAndConsistentCategoryIds) {
  constexpr int kThreads = 8;
  std::vector<nv::Domain*> got(kThreads);
  std::vector<std::uint32_t> ids(kThreads);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      got[t] = &nv::Domain::get("cudakit.test.concurrent");
      ids[t] = got[t]->category("shared");
      nv::range_push({.message = "c"}, *got[t]);
      nv::range_pop(*got[t]);
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) {
    EXPECT_EQ(got[t], got[0]);
    EXPECT_EQ(ids[t], ids[0]);
  }
}

// ---- with or without a tool ----

TEST(NvtxTool, AttachedExactlyWhenAnInjectionLibraryIsNamed) {
#if CUDAKIT_TEST_NVTX_NOOP
  EXPECT_FALSE(nv::tool_attached());  // nothing to forward to
#else
  EXPECT_EQ(nv::tool_attached(), injection_path() != nullptr);
#endif
}

#if CUDAKIT_TEST_WITH_NVTX

// The recorder this process's NVTX instances loaded (NVTX_INJECTION64_PATH).
struct Recorder {
  int (*count)() = nullptr;
  const cudakit_nvtx_event* (*event)(int) = nullptr;
  void (*clear)() = nullptr;
  int (*instances)() = nullptr;

  static Recorder* get() {
    static Recorder r;
    static bool ok = [] {
      const char* path = injection_path();
      if (!path || !nv::tool_attached()) return false;
      void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);  // the copy NVTX loaded
      if (!lib) return false;
      r.count = reinterpret_cast<int (*)()>(dlsym(lib, "cudakit_nvtx_recorder_count"));
      r.event = reinterpret_cast<const cudakit_nvtx_event* (*)(int)>(
          dlsym(lib, "cudakit_nvtx_recorder_event"));
      r.clear = reinterpret_cast<void (*)()>(dlsym(lib, "cudakit_nvtx_recorder_clear"));
      r.instances = reinterpret_cast<int (*)()>(dlsym(lib, "cudakit_nvtx_recorder_instances"));
      return r.count && r.event && r.clear && r.instances;
    }();
    return ok ? &r : nullptr;
  }
  std::vector<cudakit_nvtx_event> events() const {
    std::vector<cudakit_nvtx_event> out;
    for (int i = 0; i < count(); ++i) out.push_back(*event(i));
    return out;
  }
};

#define REQUIRE_RECORDER(rec)                                                           \
  Recorder* rec = Recorder::get();                                                      \
  if (!rec) {                                                                           \
    ASSERT_EQ(injection_path(), nullptr) << "NVTX_INJECTION64_PATH is set but the "     \
                                            "recorder did not attach";                  \
    GTEST_SKIP() << "no tool attached (cpp.test_nvtx.tool runs this with the recorder)"; \
  }

TEST(NvtxTool, PlainCallsReachTheToolWithTheirMessages) {
  REQUIRE_RECORDER(rec);
  drain();
  rec->clear();
  nv::range_push("outer");
  nv::range_push(std::string("inner"));
  nv::range_pop();
  nv::range_pop();
  nv::mark("tick");
  std::uint64_t id = nv::range_start("async");
  std::thread([id] { nv::range_end(id); }).join();
  auto ev = rec->events();
  ASSERT_EQ(ev.size(), 7u);
  EXPECT_EQ(ev[0].kind, CUDAKIT_NVTX_PUSH);
  EXPECT_STREQ(ev[0].message, "outer");
  EXPECT_STREQ(ev[0].domain, "");
  EXPECT_STREQ(ev[1].message, "inner");
  EXPECT_EQ(ev[2].kind, CUDAKIT_NVTX_POP);
  EXPECT_EQ(ev[3].kind, CUDAKIT_NVTX_POP);
  EXPECT_EQ(ev[4].kind, CUDAKIT_NVTX_MARK);
  EXPECT_STREQ(ev[4].message, "tick");
  EXPECT_EQ(ev[5].kind, CUDAKIT_NVTX_START);
  EXPECT_STREQ(ev[5].message, "async");
  EXPECT_EQ(ev[5].id, id);  // with a tool attached the id is the tool's
  EXPECT_EQ(ev[6].kind, CUDAKIT_NVTX_END);
  EXPECT_EQ(ev[6].id, id);
  EXPECT_NE(ev[6].thread, ev[5].thread);
}

TEST(NvtxTool, AttributesAndDomainsReachTheTool) {
  REQUIRE_RECORDER(rec);
  nv::Domain& d = nv::Domain::get("cudakit.test.tool");
  std::uint32_t cat = d.category("phase");
  rec->clear();
  nv::range_push({.message = "colored", .color = nv::Color::parse("#11223344"),
                  .category = cat, .payload = std::int64_t{-7}},
                 d);
  nv::range_pop(d);
  nv::mark({.message = "m", .payload = 1.5}, nv::Domain::cudakit());
  nv::mark({.message = "u", .payload = std::uint64_t{1} << 63}, nv::Domain::cudakit());
  std::uint64_t id = nv::range_start({.message = "s", .category = 3}, d);
  nv::range_end(id, d);
  nv::range_push({.message = "default domain, green", .color = nv::Color::parse("green")});
  nv::range_pop();
  auto ev = rec->events();
  ASSERT_EQ(ev.size(), 8u);
  EXPECT_EQ(ev[0].kind, CUDAKIT_NVTX_PUSH);
  EXPECT_STREQ(ev[0].domain, "cudakit.test.tool");
  EXPECT_STREQ(ev[0].message, "colored");
  EXPECT_EQ(ev[0].color, 0x11223344u);
  EXPECT_EQ(ev[0].category, cat);
  EXPECT_EQ(ev[0].payload_type, NVTX_PAYLOAD_TYPE_INT64);
  EXPECT_EQ(ev[0].payload_int64, -7);
  EXPECT_EQ(ev[1].kind, CUDAKIT_NVTX_POP);
  EXPECT_STREQ(ev[1].domain, "cudakit.test.tool");
  EXPECT_STREQ(ev[2].domain, "cudakit");
  EXPECT_EQ(ev[2].payload_type, NVTX_PAYLOAD_TYPE_DOUBLE);
  EXPECT_EQ(ev[2].payload_double, 1.5);
  EXPECT_EQ(ev[2].color, 0u);  // no colour given: none sent
  EXPECT_EQ(ev[3].payload_type, NVTX_PAYLOAD_TYPE_UNSIGNED_INT64);
  EXPECT_EQ(ev[3].payload_uint64, std::uint64_t{1} << 63);
  EXPECT_EQ(ev[4].kind, CUDAKIT_NVTX_START);
  EXPECT_EQ(ev[4].category, 3u);
  EXPECT_EQ(ev[4].id, id);
  EXPECT_EQ(ev[5].kind, CUDAKIT_NVTX_END);
  EXPECT_STREQ(ev[5].domain, "cudakit.test.tool");
  EXPECT_STREQ(ev[6].domain, "");
  EXPECT_EQ(ev[6].color, 0xFF008000u);
}

TEST(NvtxTool, CategoryNamesAndDomainsAreAnnouncedOnce) {
  REQUIRE_RECORDER(rec);
  rec->clear();
  nv::Domain& d = nv::Domain::get("cudakit.test.announce");
  EXPECT_EQ(rec->count(), 0);  // making the object creates no NVTX domain yet
  std::uint32_t id = d.category("loader");
  d.category("loader");
  d.name_category(99, "explicit");
  auto ev = rec->events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, CUDAKIT_NVTX_DOMAIN_CREATE);
  EXPECT_STREQ(ev[0].message, "cudakit.test.announce");
  EXPECT_EQ(ev[1].kind, CUDAKIT_NVTX_NAME_CATEGORY);
  EXPECT_STREQ(ev[1].domain, "cudakit.test.announce");
  EXPECT_STREQ(ev[1].message, "loader");
  EXPECT_EQ(ev[1].category, id);
  EXPECT_EQ(ev[2].category, 99u);
  EXPECT_STREQ(ev[2].message, "explicit");
}

TEST(NvtxTool, PopWithNothingOpenIsStillForwarded) {
  REQUIRE_RECORDER(rec);
  drain();
  rec->clear();
  EXPECT_EQ(nv::range_pop(), -1);
  ASSERT_EQ(rec->count(), 1);
  EXPECT_EQ(rec->events()[0].kind, CUDAKIT_NVTX_POP);
}

TEST(NvtxTool, Nvtx3CppApiAddressesTheSameCudakitDomain) {
  REQUIRE_RECORDER(rec);
  rec->clear();
  {
    nvtx3::scoped_range_in<nv::nvtx3_domain> r{"from nvtx3", nvtx3::rgb{255, 0, 0},
                                               nvtx3::payload{5}};
  }
  auto ev = rec->events();
  // NVTX3 is header-only: each binary that includes it is an NVTX instance with its own
  // "cudakit" domain handle, and the tool groups by name. This test links cudakit's objects
  // statically (libcudakit_internal.a), so test and library may share one instance.
  EXPECT_GE(rec->instances(), 1);
  std::vector<cudakit_nvtx_event> ranges;
  for (const auto& e : ev) {
    if (e.kind == CUDAKIT_NVTX_PUSH || e.kind == CUDAKIT_NVTX_POP) ranges.push_back(e);
  }
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_STREQ(ranges[0].domain, "cudakit");
  EXPECT_STREQ(ranges[0].message, "from nvtx3");
  EXPECT_EQ(ranges[0].color, 0xFFFF0000u);
  EXPECT_STREQ(ranges[1].domain, "cudakit");
}

#endif  // CUDAKIT_TEST_WITH_NVTX

}  // namespace
