// Devices, streams and events through the public C++ API (runs on either backend).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"

using namespace cudakit;

class Streams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available()) GTEST_SKIP() << "no device on backend " << backend_name();
  }
};

TEST_F(Streams, DevicesAndProperties) {
  EXPECT_GE(device_count(), 1);
  init();
  EXPECT_TRUE(is_initialized());
  const auto& p = get_device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_EQ(p.uuid.size(), 36u);
  EXPECT_EQ(get_device_capability(0), std::make_pair(p.major, p.minor));
  EXPECT_THROW(get_device_properties(device_count()), ValueError);
  EXPECT_THROW(set_device(-5), ValueError);
  EXPECT_THROW(set_device(1000), ValueError);
}

TEST_F(Streams, DeviceGuardRestores) {
  if (device_count() < 2) GTEST_SKIP();
  set_device(0);
  {
    DeviceGuard g(1);
    EXPECT_EQ(current_device(), 1);
  }
  EXPECT_EQ(current_device(), 0);
}

TEST_F(Streams, CurrentStreamIsPerThreadAndGuarded) {
  set_device(0);
  EXPECT_TRUE(current_stream().is_default());
  StreamRef pooled = stream_from_pool(0);
  {
    StreamGuard g(pooled);
    EXPECT_EQ(current_stream(), pooled);
    std::thread t([] { EXPECT_TRUE(current_stream(0).is_default()); });
    t.join();
  }
  EXPECT_TRUE(current_stream().is_default());
  set_stream(pooled);
  EXPECT_EQ(current_stream(0), pooled);
  set_stream(default_stream(0));
}

TEST_F(Streams, PoolIsRoundRobin) {
  std::vector<StreamRef> seen;
  for (int i = 0; i < 33; ++i) seen.push_back(stream_from_pool(0));
  // 32 streams per priority: after a full cycle we are back to a stream seen before.
  int repeats = 0;
  for (int i = 0; i < 33; ++i)
    for (int j = i + 1; j < 33; ++j) repeats += seen[i] == seen[j];
  EXPECT_EQ(repeats, 1);
  StreamRef hi = stream_from_pool(0, -1);
  EXPECT_LT(hi.priority(), 0);
  EXPECT_EQ(stream_from_pool(0, 0).priority(), 0);
}

TEST_F(Streams, EventOrdersWorkAcrossStreams) {
  Stream a(0), b(0);
  std::atomic<int> value{0};
  a.launch_host_func([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 1;
  });
  Event e;
  e.record(a);
  b.wait(e);
  int seen = -1;
  b.launch_host_func([&] { seen = value.load(); });
  b.sync();
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(e.query());
  EXPECT_TRUE(a.is_done());
}

TEST_F(Streams, WaitStream) {
  Stream a(0), b(0);
  std::atomic<int> value{0};
  a.launch_host_func([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 7;
  });
  b.wait(a.ref());
  int seen = 0;
  b.launch_host_func([&] { seen = value.load(); });
  b.sync();
  EXPECT_EQ(seen, 7);
}

TEST_F(Streams, ElapsedTime) {
  Stream s(0);
  Event start({.enable_timing = true}), end({.enable_timing = true});
  start.record(s);
  s.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  end.record(s);
  end.sync();
  float ms = start.elapsed_time(end);
  EXPECT_GE(ms, 15.0f);
  EXPECT_LT(ms, 2000.0f);
}

TEST_F(Streams, EventErrors) {
  Event untimed, timed({.enable_timing = true});
  EXPECT_TRUE(untimed.query());  // never recorded: complete
  untimed.sync();                // no-op
  EXPECT_THROW(timed.elapsed_time(untimed), ValueError);
  Event t2({.enable_timing = true});
  EXPECT_THROW(timed.elapsed_time(t2), ValueError);  // not recorded
  EXPECT_THROW(Event({.enable_timing = true, .interprocess = true}), ValueError);
  EXPECT_THROW(untimed.ipc_handle(), ValueError);
  if (device_count() >= 2) {
    Event e;
    e.record(stream_from_pool(0));
    EXPECT_THROW(e.record(stream_from_pool(1)), ValueError);
  }
}

TEST_F(Streams, SyncDebugMode) {
  set_sync_debug_mode(SyncDebugMode::error);
  synchronize();  // not reported, as torch's device_synchronize
  Stream s(0);
  EXPECT_THROW(s.sync(), Error);
  set_sync_debug_mode(SyncDebugMode::none);
  synchronize();
  s.sync();
}

TEST_F(Streams, ManyThreadsManyStreams) {
  constexpr int kThreads = 8, kTasks = 200;
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StreamRef s = stream_from_pool(t % device_count());
      StreamGuard g(s);
      int order = 0;
      bool in_order = true;
      for (int i = 0; i < kTasks; ++i) {
        current_stream().launch_host_func([&, i] {
          if (order != i) in_order = false;
          ++order;
          total.fetch_add(1);
        });
      }
      current_stream().sync();
      EXPECT_TRUE(in_order);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(total.load(), kThreads * kTasks);
}

TEST_F(Streams, MoveSemantics) {
  Stream a(0);
  auto h = a.handle();
  Stream b(std::move(a));
  EXPECT_EQ(b.handle(), h);
  EXPECT_EQ(a.handle(), nullptr);
  Event e({.enable_timing = true});
  e.record(b);
  Event f(std::move(e));
  EXPECT_TRUE(f.is_created());
  EXPECT_FALSE(e.is_created());
  f.sync();
}

TEST(Errors, CheckErrorNamesCode) {
  try {
    check_error(2);
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), 2);
  }
  try {
    check_error(101);
    FAIL();
  } catch (const AcceleratorError& e) {
    EXPECT_EQ(e.code(), 101);
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_INVALID_DEVICE"), std::string::npos);
  }
  EXPECT_NO_THROW(check_error(0));
}
