// cudakit::nccl on the backend in use: torch.cuda.nccl's single-process collectives,
// Communicator ranks in threads of one process (the same shared-memory join as separate
// processes on the emulated backend) and in separate processes (this executable re-run as
// a worker), failures: abort, a dead or departed peer, timeouts, mismatched operations.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "comm_test_util.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/nccl.hpp"
#include "cudakit/ops.hpp"
#include "nccl/communicator_impl.hpp"

extern char** environ;

using namespace cudakit;
using namespace cudakit::testing;
using namespace std::chrono_literals;
namespace nc = cudakit::nccl;

namespace {

bool engine() {
  if (devices() < 1) return false;
  return nc::engine_available();
}

#define REQUIRE_ENGINE(min_devices)                                                    \
  do {                                                                                 \
    if (devices() < (min_devices)) GTEST_SKIP() << "needs " << (min_devices) << " devices"; \
    if (!engine()) GTEST_SKIP() << "no collectives engine (NCCL not found)";           \
  } while (0)

nc::CommOptions on(int device, std::chrono::milliseconds timeout = 60s, bool blocking = true) {
  nc::CommOptions o;
  o.device = device;
  o.timeout = timeout;
  o.blocking = blocking;
  return o;
}

std::vector<Tensor> per_device(int n, std::int64_t len, DType dtype, double scale) {
  std::vector<Tensor> out;
  for (int d = 0; d < n; ++d) {
    out.push_back(filled(len, [&](std::int64_t i) { return scale * (d + 1) + static_cast<double>(i % 7); },
                         dtype, Device::cuda(d)));
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- basics

TEST(Nccl, VersionAndIds) {
  REQUIRE_ENGINE(1);
  nc::Version v = nc::version();
  EXPECT_EQ(v.major, 2);
  EXPECT_GE(v.minor, 0);
  nc::UniqueId a = nc::unique_id(), b = nc::unique_id();
  EXPECT_FALSE(a == b);
  EXPECT_EQ(nc::UniqueId::from_bytes(a.to_bytes()), a);
  EXPECT_THROW(nc::UniqueId::from_bytes("short"), ValueError);
}

TEST(Nccl, IsAvailable) {
  REQUIRE_ENGINE(1);
  Tensor a = zeros({4}, device_options(DType::float32, 0));
  EXPECT_TRUE(nc::is_available({a}));
  EXPECT_FALSE(nc::is_available({a, a}));  // one device twice
  EXPECT_FALSE(nc::is_available({zeros({4})}));  // CPU
  EXPECT_FALSE(nc::is_available({zeros({4, 4}, device_options(DType::float32, 0)).t()}));
  if (devices() >= 2) {
    EXPECT_TRUE(nc::is_available({a, zeros({4}, device_options(DType::float32, 1))}));
  }
}

// ---------------------------------------------------------------- single process

TEST(NcclSingleProcess, AllReduceEveryOperator) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  for (nc::ReduceOp op : {nc::ReduceOp::sum, nc::ReduceOp::prod, nc::ReduceOp::max,
                          nc::ReduceOp::min, nc::ReduceOp::avg}) {
    auto ins = per_device(n, 1000, DType::float64, 1.0);
    std::vector<std::vector<double>> host;
    for (auto& t : ins) host.push_back(values(t));
    nc::all_reduce(ins, ins, op);
    for (int d = 0; d < n; ++d) {
      auto got = values(ins[static_cast<std::size_t>(d)]);
      for (std::size_t i = 0; i < got.size(); ++i) {
        double want = host[0][i];
        for (int k = 1; k < n; ++k) {
          const double x = host[static_cast<std::size_t>(k)][i];
          switch (op) {
            case nc::ReduceOp::sum: case nc::ReduceOp::avg: want += x; break;
            case nc::ReduceOp::prod: want *= x; break;
            case nc::ReduceOp::max: want = std::max(want, x); break;
            case nc::ReduceOp::min: want = std::min(want, x); break;
          }
        }
        if (op == nc::ReduceOp::avg) want /= n;
        ASSERT_DOUBLE_EQ(got[i], want) << nc::reduce_op_name(op) << " device " << d << " i " << i;
      }
    }
  }
}

TEST(NcclSingleProcess, LargeAllReduceGoesInChunks) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  const std::int64_t len = 700'000;  // 2.8 MB of float32: several staging chunks
  auto ins = per_device(n, len, DType::float32, 1000.0);
  std::vector<Tensor> outs;
  for (int d = 0; d < n; ++d) outs.push_back(empty({len}, device_options(DType::float32, d)));
  nc::all_reduce(ins, outs);
  double base = 0;
  for (int d = 0; d < n; ++d) base += 1000.0 * (d + 1);
  for (int d = 0; d < n; ++d) {
    auto got = values(outs[static_cast<std::size_t>(d)]);
    for (std::int64_t i = 0; i < len; i += 9973) {
      ASSERT_EQ(got[static_cast<std::size_t>(i)], base + n * static_cast<double>(i % 7)) << i;
    }
    ASSERT_EQ(got.back(), base + n * static_cast<double>((len - 1) % 7));
  }
}

TEST(NcclSingleProcess, ReduceBroadcastGatherScatter) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  const std::int64_t len = 12;
  // reduce to the last device
  auto ins = per_device(n, len, DType::int64, 10.0);
  Tensor out = zeros({len}, device_options(DType::int64, n - 1));
  nc::reduce(ins, out, n - 1);
  auto got = values(out);
  for (std::int64_t i = 0; i < len; ++i) {
    double want = 0;
    for (int d = 0; d < n; ++d) want += 10.0 * (d + 1) + static_cast<double>(i % 7);
    EXPECT_EQ(got[static_cast<std::size_t>(i)], want);
  }
  // broadcast from device 1
  auto bs = per_device(n, len, DType::float16, 3.0);
  auto root = values(bs[1]);
  nc::broadcast(bs, 1);
  for (auto& t : bs) EXPECT_EQ(values(t), root);
  // all_gather
  auto gs = per_device(n, len, DType::bfloat16, 2.0);
  std::vector<std::vector<double>> parts;
  for (auto& t : gs) parts.push_back(values(t));
  std::vector<Tensor> gathered;
  for (int d = 0; d < n; ++d) gathered.push_back(empty({len * n}, device_options(DType::bfloat16, d)));
  nc::all_gather(gs, gathered);
  std::vector<double> want;
  for (auto& p : parts) want.insert(want.end(), p.begin(), p.end());
  for (auto& t : gathered) EXPECT_EQ(values(t), want);
  // reduce_scatter
  std::vector<Tensor> rs_in, rs_out;
  for (int d = 0; d < n; ++d) {
    rs_in.push_back(filled(len * n, [&](std::int64_t i) { return static_cast<double>(i + d); }, DType::int32, Device::cuda(d)));
    rs_out.push_back(empty({len}, device_options(DType::int32, d)));
  }
  nc::reduce_scatter(rs_in, rs_out, nc::ReduceOp::max);
  for (int d = 0; d < n; ++d) {
    auto v = values(rs_out[static_cast<std::size_t>(d)]);
    for (std::int64_t i = 0; i < len; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], d * len + i + (n - 1));
  }
}

TEST(NcclSingleProcess, BoolAndComplex) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  std::vector<Tensor> bools;
  for (int d = 0; d < n; ++d) bools.push_back(make({d == 0 ? 1.0 : 0.0, 0, 1, 0}, DType::bool_, Device::cuda(d)));
  std::vector<Tensor> bools2;
  for (auto& b : bools) bools2.push_back(b.clone());
  nc::all_reduce(bools, bools, nc::ReduceOp::sum);  // logical or
  EXPECT_EQ(values(bools[1]), (std::vector<double>{1, 0, 1, 0}));
  nc::all_reduce(bools2, bools2, nc::ReduceOp::prod);  // logical and
  EXPECT_EQ(values(bools2[0]), (std::vector<double>{0, 0, 1, 0}));
  std::vector<Tensor> cs;
  for (int d = 0; d < n; ++d) cs.push_back(make({1.0 + d, 2.0}, DType::float32, Device::cuda(d)).to(DType::complex64));
  nc::all_reduce(cs, cs);
  Tensor real = cs[0].to(Device::cpu());
  auto* p = static_cast<const float*>(real.data_ptr());  // (re, im) pairs
  EXPECT_EQ(p[0], n + n * (n - 1) / 2.0f);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_EQ(p[2], 2.0f * n);
  EXPECT_THROW(nc::all_reduce(cs, cs, nc::ReduceOp::max), ValueError);
}

TEST(NcclSingleProcess, StreamsAreHonoured) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  std::vector<Stream> streams;
  nc::StreamList list;
  for (int d = 0; d < n; ++d) streams.emplace_back(d);
  for (auto& s : streams) list.push_back(s.ref());
  // Work queued before the collective on the given streams must finish first.
  auto ins = per_device(n, 64, DType::float32, 0.0);
  for (int d = 0; d < n; ++d) {
    ins[static_cast<std::size_t>(d)].zero_();
    current_stream(d).sync();
    Tensor t = ins[static_cast<std::size_t>(d)];
    // The fill below runs late on its stream: read on any other stream, the input is zero.
    streams[static_cast<std::size_t>(d)].launch_host_func([] { std::this_thread::sleep_for(20ms); });
    StreamGuard g(streams[static_cast<std::size_t>(d)]);
    t.fill_(Scalar(d + 1.0));
  }
  nc::all_reduce(ins, ins, nc::ReduceOp::sum, list);
  for (auto& s : streams) s.sync();
  const double want = n * (n + 1) / 2.0;
  for (auto& t : ins) EXPECT_EQ(values(t)[0], want);
  // a stream of the wrong device
  nc::StreamList wrong(n);
  wrong[0] = streams[1].ref();
  EXPECT_THROW(nc::all_reduce(ins, ins, nc::ReduceOp::sum, wrong), ValueError);
}

TEST(NcclSingleProcess, BadInputsChangeNothing) {
  REQUIRE_ENGINE(2);
  Tensor a = full({4}, Scalar(1.0), device_options(DType::float32, 0));
  Tensor b = full({4}, Scalar(2.0), device_options(DType::float32, 1));
  Tensor c = full({5}, Scalar(2.0), device_options(DType::float32, 1));
  Tensor i = full({4}, Scalar(2), device_options(DType::int32, 1));
  EXPECT_THROW(nc::all_reduce({}, {}), ValueError);
  EXPECT_THROW(nc::all_reduce({a, c}, {a, c}), ValueError);          // sizes
  EXPECT_THROW(nc::all_reduce({a, i}, {a, i}), ValueError);          // dtypes
  EXPECT_THROW(nc::all_reduce({a, a}, {a, a}), ValueError);          // one device twice
  EXPECT_THROW(nc::all_reduce({a, b}, {a}), ValueError);             // lengths
  EXPECT_THROW(nc::all_reduce({a, b}, {b, a}), ValueError);          // output on another device
  EXPECT_THROW(nc::reduce({a, b}, a, 2), ValueError);                // root
  EXPECT_THROW(nc::all_gather({a, b}, {a, b}), ValueError);          // output too small
  EXPECT_THROW(nc::all_reduce({a, b}, {a, b}, static_cast<nc::ReduceOp>(9)), ValueError);
  Tensor s = full({4}, Scalar(1), device_options(DType::int16, 0));
  Tensor s1 = full({4}, Scalar(1), device_options(DType::int16, 1));
  EXPECT_THROW(nc::all_reduce({s, s1}, {s, s1}), ValueError);        // NCCL has no int16
  EXPECT_EQ(values(a), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(values(b), (std::vector<double>{2, 2, 2, 2}));
}

// ---------------------------------------------------------------- ranks in threads

// Ranks in threads each take their own device: NCCL refuses two ranks of one communicator
// on a GPU (the emulated engine would allow it, with a stream per rank).
TEST(NcclCommunicator, CollectivesAcrossThreads) {
  REQUIRE_ENGINE(2);
  const int n = devices();
  const nc::UniqueId id = nc::unique_id();
  run_ranks(n, [&](int r) {
    const int dev = r % devices();
    nc::Communicator c(n, id, r, on(dev));
    ASSERT_EQ(c.rank(), r);
    ASSERT_EQ(c.size(), n);
    ASSERT_TRUE(c.is_ready());
    const std::int64_t len = 300'001;  // odd, > 1 MiB of float32
    Tensor x = filled(len, [&](std::int64_t i) { return static_cast<double>((i % 100) * (r + 1)); }, DType::float32, Device::cuda(dev));
    c.all_reduce(x);
    Tensor g = empty({len * n}, device_options(DType::float32, dev));
    c.all_gather(x, g);
    Tensor b = r == 1 ? full({5}, Scalar(42), device_options(DType::int64, dev)) : zeros({5}, device_options(DType::int64, dev));
    c.broadcast(b, 1);
    Tensor rs_in = filled(3 * n, [&](std::int64_t i) { return static_cast<double>(i); }, DType::float64, Device::cuda(dev));
    Tensor rs = empty({3}, device_options(DType::float64, dev));
    c.reduce_scatter(rs_in, rs);
    c.synchronize();
    const double k = n * (n + 1) / 2.0;
    auto xv = values(x);
    for (std::int64_t i = 0; i < len; i += 1013) ASSERT_EQ(xv[static_cast<std::size_t>(i)], (i % 100) * k);
    auto gv = values(g);
    ASSERT_EQ(gv[static_cast<std::size_t>(len * (n - 1) + 5)], 5 * k);
    ASSERT_EQ(values(b), std::vector<double>(5, 42));
    auto rv = values(rs);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(rv[static_cast<std::size_t>(i)], n * (3.0 * r + i));
  });
}

TEST(NcclCommunicator, SendRecvRingInAGroup) {
  REQUIRE_ENGINE(2);
  const int n = std::min(3, devices());
  const nc::UniqueId id = nc::unique_id();
  run_ranks(n, [&](int r) {
    const int dev = r % devices();
    nc::Communicator c(n, id, r, on(dev));
    // 1 MB each way: larger than a FIFO, so both directions must progress together.
    const std::int64_t len = 250'000;
    Tensor mine = full({len}, Scalar(r + 1), device_options(DType::int32, dev));
    Tensor got = zeros({len}, device_options(DType::int32, dev));
    {
      nc::Group group;
      c.send(mine, (r + 1) % n);
      c.recv(got, (r + n - 1) % n);
    }
    c.synchronize();
    auto v = values(got);
    ASSERT_EQ(v.front(), ((r + n - 1) % n) + 1);
    ASSERT_EQ(v.back(), ((r + n - 1) % n) + 1);
  });
}

TEST(NcclCommunicator, NonBlockingInitWaitsForLateRanks) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  std::atomic<bool> early_saw_not_ready{false};
  run_ranks(2, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(300ms);
    nc::Communicator c(2, id, r, on(r, 30s, /*blocking=*/false));
    if (r == 0 && !c.is_ready()) early_saw_not_ready = true;
    Tensor t = full({8}, Scalar(r + 1.0), device_options(DType::float32, r));
    c.all_reduce(t);  // waits for the join itself
    c.synchronize();
    EXPECT_TRUE(c.is_ready());
    EXPECT_EQ(values(t)[0], 3.0);
  });
  EXPECT_TRUE(early_saw_not_ready.load());
}

TEST(NcclCommunicator, JoinTimesOutWhenARankNeverComes) {
  REQUIRE_ENGINE(1);
  const nc::UniqueId id = nc::unique_id();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    nc::Communicator c(2, id, 0, on(0, 400ms));
    FAIL() << "joined alone";
  } catch (const nc::NcclError& e) {
    EXPECT_TRUE(e.timed_out()) << e.what();
    EXPECT_EQ(e.code(), nc::result::remote_error);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(NcclCommunicator, AbortWakesThePeer) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  run_ranks(2, [&](int r) {
    nc::Communicator c(2, id, r, on(r, 120s));
    if (r == 0) {
      std::this_thread::sleep_for(200ms);
      c.abort();
      EXPECT_TRUE(c.error().has_value());
      EXPECT_THROW(c.all_reduce(zeros({4}, device_options(DType::float32, 0))), nc::NcclError);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Tensor t = zeros({4}, device_options(DType::float32, r));
    try {
      c.all_reduce(t);  // rank 0 never joins this one
      c.synchronize();
      FAIL() << "all_reduce finished without its peer";
    } catch (const nc::NcclError& e) {
      EXPECT_NE(std::string(e.what()).find("abort"), std::string::npos) << e.what();
      EXPECT_FALSE(e.timed_out());
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_THROW(c.check(), nc::NcclError);
  });
}

// The interleaving behind a CI flake of AbortWakesThePeer under TSan, made deterministic: a
// backend whose state() answers "ready" and, before the caller takes its next step, fails and
// lets the operation it was blocking complete (a peer's abort landing between the
// watchdog's look at the state and its look at the operations). The operation must not be
// retired as a success.
namespace {
class FailsWhileAnswering final : public detail::BackendComm {
 public:
  explicit FailsWhileAnswering(int device) : device_(device) {}
  int rank() const noexcept override { return 1; }
  int size() const noexcept override { return 2; }
  int device() const noexcept override { return device_; }
  detail::CommState state(detail::CommError* error) noexcept override {
    if (failed_.load()) {
      if (error) error->message = "rank 0 aborted the communicator";
      return detail::CommState::failed;
    }
    if (armed_.load()) {  // the answer below is already stale when the caller reads it
      failed_ = true;
      release_ = true;
      try {
        while (!detail::backend().stream_query(stream_)) std::this_thread::sleep_for(1ms);
      } catch (...) {
      }
    }
    return detail::CommState::ready;
  }
  void abort() noexcept override { failed_ = true, release_ = true; }
  void enqueue(detail::CommArgs, NativeStream s) override {
    stream_ = s;
    detail::backend().launch_host_task(s, [this] {  // the collective, waiting for its peer
      while (!release_.load()) std::this_thread::sleep_for(1ms);
    });
    armed_ = true;
  }

 private:
  int device_;
  NativeStream stream_ = nullptr;
  std::atomic<bool> armed_{false}, failed_{false}, release_{false};
};
}  // namespace

TEST(NcclCommunicator, OperationEndedByAFailureIsNotASuccess) {
  if (devices() < 1) GTEST_SKIP() << "needs a device";
  Stream s(0);
  auto impl = std::make_shared<nc::Communicator::Impl>(std::make_shared<FailsWhileAnswering>(0),
                                                       on(0, 60s));
  impl->enqueue(detail::CommArgs{}, StreamRef(s), {}, "all_reduce");
  try {
    impl->synchronize();
    FAIL() << "all_reduce finished without its peer";
  } catch (const nc::NcclError& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
  EXPECT_THROW(impl->throw_if_failed(), nc::NcclError);
}

// A communicator's failure belongs to the communicator: the survivor's streams (the one the
// collective ran on and the device's legacy default stream) keep working after the peer left
// and after abort(), as on CUDA, where an NCCL failure is no sticky context error.
TEST(NcclCommunicator, SurvivorsStreamsKeepWorkingAfterThePeerLeft) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  run_ranks(2, [&](int r) {
    nc::Communicator c(2, id, r, on(r, 120s));
    if (r == 0) {
      c.reset();  // gone while rank 1 waits in its all_reduce
      return;
    }
    Tensor t = zeros({4}, device_options(DType::float32, r));
    c.all_reduce(t);
    EXPECT_THROW(c.synchronize(), nc::NcclError);
    auto works = [&](const char* when) {
      for (StreamRef st : {current_stream(r), default_stream(r)}) {
        StreamGuard guard(st);
        Tensor y = full({4}, Scalar(2.0), device_options(DType::float32, r));
        add_(y, y);
        EXPECT_NO_THROW(st.sync()) << when;
        EXPECT_EQ(values(y), std::vector<double>(4, 4.0)) << when;
      }
      EXPECT_NO_THROW(synchronize(r)) << when;
    };
    works("after the peer left");
    c.abort();
    works("after abort()");
  });
}

TEST(NcclCommunicator, DepartedPeerIsAnErrorNotAHang) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  run_ranks(2, [&](int r) {
    nc::Communicator c(2, id, r, on(r, 120s));
    if (r == 0) {
      c.reset();  // gone before the collective rank 1 waits in
      return;
    }
    Tensor t = zeros({4}, device_options(DType::float32, r));
    std::this_thread::sleep_for(50ms);
    c.all_reduce(t);
    EXPECT_THROW(c.synchronize(), nc::NcclError);
  });
}

TEST(NcclCommunicator, OperationTimeout) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  std::atomic<bool> done{false};
  run_ranks(2, [&](int r) {
    nc::Communicator c(2, id, r, on(r, 500ms));
    if (r == 1) {  // alive, holds its communicator, never issues the collective
      while (!done.load()) std::this_thread::sleep_for(10ms);
      return;
    }
    Tensor t = zeros({4}, device_options(DType::float32, 0));
    const auto t0 = std::chrono::steady_clock::now();
    c.all_reduce(t);
    try {
      c.synchronize();
      FAIL() << "no timeout";
    } catch (const nc::NcclError& e) {
      EXPECT_TRUE(e.timed_out()) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    done = true;
  });
}

TEST(NcclCommunicator, MismatchedOperationsAreReported) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  run_ranks(2, [&](int r) {
    nc::Communicator c(2, id, r, on(r, 60s));
    Tensor t = zeros({r == 0 ? 10 : 20}, device_options(DType::float32, r));
    c.all_reduce(t);
    try {
      c.synchronize();
      FAIL() << "mismatch not detected";
    } catch (const nc::NcclError& e) {
      EXPECT_NE(std::string(e.what()).find("mismatched"), std::string::npos) << e.what();
    }
  });
}

TEST(NcclCommunicator, BadArgumentsAreValueErrors) {
  REQUIRE_ENGINE(1);
  const nc::UniqueId id = nc::unique_id();
  EXPECT_THROW(nc::Communicator(0, id, 0, on(0)), ValueError);
  EXPECT_THROW(nc::Communicator(2, id, 2, on(0)), ValueError);
  EXPECT_THROW(nc::Communicator(1, id, 0, on(99)), Error);
  nc::Communicator empty_handle;
  EXPECT_THROW(empty_handle.rank(), ValueError);
  nc::Communicator c(1, nc::unique_id(), 0, on(0));
  Tensor a = zeros({4}, device_options(DType::float32, 0));
  EXPECT_THROW(c.all_reduce(a, zeros({5}, device_options(DType::float32, 0))), ValueError);
  EXPECT_THROW(c.all_reduce(a, zeros({4})), ValueError);  // CPU
  EXPECT_THROW(c.broadcast(a, 1), ValueError);             // root out of range
  EXPECT_THROW(c.send(a, -1), ValueError);
  EXPECT_THROW(c.all_gather(a, zeros({8}, device_options(DType::float32, 0))), ValueError);
  if (devices() >= 2) {
    EXPECT_THROW(c.all_reduce(zeros({4}, device_options(DType::float32, 1))), ValueError);
    Stream other(1);
    EXPECT_THROW(c.all_reduce(a, nc::ReduceOp::sum, other.ref()), ValueError);
  }
  c.all_reduce(a);  // still usable
  c.synchronize();
}

TEST(NcclCommunicator, FileRendezvous) {
  REQUIRE_ENGINE(2);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cudakit-test-id-" + std::to_string(::getpid()))).string();
  run_ranks(2, [&](int r) {
    nc::Communicator c = nc::Communicator::from_file(path, 2, r, on(r, 30s));
    Tensor t = full({3}, Scalar(r + 1), device_options(DType::int64, r));
    c.all_reduce(t);
    c.synchronize();
    EXPECT_EQ(values(t)[2], 3.0);
  });
  EXPECT_FALSE(std::filesystem::exists(path)) << "rank 0 leaves no id file behind";
}

TEST(NcclCommunicator, CapturedIntoAGraph) {
  REQUIRE_ENGINE(2);
  const nc::UniqueId id = nc::unique_id();
  run_ranks(2, [&](int r) {
    const int dev = r % devices();
    nc::Communicator c(2, id, r, on(dev));
    Tensor t = full({16}, Scalar(1.0), device_options(DType::float32, dev));
    Stream s(dev);
    s.wait(current_stream(dev));  // the fill ran on this thread's stream
    CUDAGraph g;
    {
      StreamGuard guard(s);
      g.capture_begin(std::nullopt, CaptureErrorMode::thread_local_);
      c.all_reduce(t, nc::ReduceOp::sum, s.ref());
      g.capture_end();
      g.replay();
      g.replay();
    }
    s.sync();
    EXPECT_EQ(values(t)[0], 4.0);  // 1 -> 2 -> 4: each replay is one all_reduce
  });
}

// ---------------------------------------------------------------- separate processes

namespace {

// Re-runs this executable with one test as a worker, RANK / WORLD_SIZE / the id file in the
// environment. Returns the pids.
std::vector<pid_t> spawn_workers(int n, const std::string& test, const std::string& id_file) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    env_strings.push_back("CUDAKIT_COMM_WORKER=1");
    env_strings.push_back("RANK=" + std::to_string(r));
    env_strings.push_back("WORLD_SIZE=" + std::to_string(n));
    env_strings.push_back("CUDAKIT_COMM_ID_FILE=" + id_file);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string filter = "--gtest_filter=NcclWorker." + test;
    char exe[] = "/proc/self/exe";
    char* argv[] = {exe, filter.data(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, exe, nullptr, nullptr, argv, envp.data()), 0);
    pids.push_back(pid);
  }
  return pids;
}

int wait_status(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    std::this_thread::sleep_for(20ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "worker " << pid << " did not finish within " << limit.count() << " s";
  return status;
}

bool worker() { return std::getenv("CUDAKIT_COMM_WORKER") != nullptr; }
int env_rank() { return std::atoi(std::getenv("RANK")); }

}  // namespace

TEST(NcclProcesses, CollectivesAndAKilledRank) {
  REQUIRE_ENGINE(2);
  if (worker()) GTEST_SKIP();
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("cudakit-test-proc-" + std::to_string(::getpid()))).string();
  auto pids = spawn_workers(2, "KillRankOne", file);
  const int s0 = wait_status(pids[0], 60s);
  const int s1 = wait_status(pids[1], 60s);
  EXPECT_TRUE(WIFEXITED(s0) && WEXITSTATUS(s0) == 0) << "rank 0 status " << s0;
  EXPECT_TRUE(WIFSIGNALED(s1) && WTERMSIG(s1) == SIGKILL) << "rank 1 status " << s1;
  std::filesystem::remove(file);
}

// Worker: both ranks all_reduce once; rank 1 then dies by SIGKILL while rank 0 waits in the
// next all_reduce. Rank 0 must get an NcclError within its timeout (the emulated engine sees
// the death at once; NCCL's kernels wait until the watchdog aborts them at the timeout).
TEST(NcclWorker, KillRankOne) {
  if (!worker()) GTEST_SKIP() << "runs as a worker of NcclProcesses";
  const int r = env_rank();
  const int dev = r % devices();
  nc::Communicator c = nc::Communicator::from_file(std::getenv("CUDAKIT_COMM_ID_FILE"), 2, r, on(dev, 15s));
  Tensor t = full({1000}, Scalar(r + 1.0), device_options(DType::float32, dev));
  c.all_reduce(t);
  c.synchronize();
  ASSERT_EQ(values(t)[999], 3.0);
  if (r == 1) {
    std::this_thread::sleep_for(200ms);  // rank 0 is waiting in the next all_reduce by now
    kill(getpid(), SIGKILL);
  }
  const auto t0 = std::chrono::steady_clock::now();
  c.all_reduce(t);
  try {
    c.synchronize();
    FAIL() << "the collective finished without rank 1";
  } catch (const nc::NcclError& e) {
    std::fprintf(stderr, "rank 0 got, after %.2f s: %s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), e.what());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 25s);
  if (::testing::Test::HasFailure()) std::_Exit(1);
  std::_Exit(0);  // skip static destructors: a cleaner exit is not what is tested
}
