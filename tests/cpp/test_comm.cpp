// cudakit::comm (torch.cuda.comm) on every device the backend has, through each transport
// (peer kernels / host tasks, the collectives engine, plain copies): values, devices,
// stream ordering, coalesced packing, and bad input that must leave everything untouched.
#include <chrono>
#include <thread>

#include "comm_test_util.hpp"
#include "cudakit/comm.hpp"
#include "cudakit/nccl.hpp"

using namespace cudakit;
using namespace cudakit::testing;
using namespace std::chrono_literals;

namespace {

class CommTransport : public ::testing::TestWithParam<comm::Transport> {
 protected:
  void SetUp() override {
    if (devices() < 2) GTEST_SKIP() << "needs 2 devices";
    if (GetParam() == comm::Transport::nccl && !nccl::engine_available()) GTEST_SKIP() << "no NCCL";
    comm::set_transport(GetParam());
  }
  void TearDown() override { comm::set_transport(comm::Transport::automatic); }
};

std::string name(const ::testing::TestParamInfo<comm::Transport>& p) {
  return p.param == comm::Transport::automatic ? "automatic" : comm::transport_name(p.param);
}

std::vector<int> all_devices() {
  std::vector<int> d;
  for (int i = 0; i < devices(); ++i) d.push_back(i);
  return d;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(All, CommTransport,
                         ::testing::Values(comm::Transport::automatic, comm::Transport::peer,
                                           comm::Transport::nccl, comm::Transport::copy),
                         name);

TEST_P(CommTransport, BroadcastEveryDtype) {
  for (DType t : {DType::float32, DType::float16, DType::bfloat16, DType::int64, DType::int16,
                  DType::bool_, DType::uint8, DType::complex64, DType::float64}) {
    Tensor src = filled(1001, [](std::int64_t i) { return static_cast<double>(i % 2); }, t, Device::cuda(0));
    auto out = comm::broadcast(src, all_devices());
    ASSERT_EQ(out.size(), static_cast<std::size_t>(devices()));
    EXPECT_EQ(out[0].data_ptr(), src.data_ptr()) << "the source is returned as is";
    const auto want = values(src);
    for (int d = 0; d < devices(); ++d) {
      EXPECT_EQ(out[static_cast<std::size_t>(d)].device(), Device::cuda(d));
      EXPECT_EQ(out[static_cast<std::size_t>(d)].dtype(), t);
      EXPECT_EQ(values(out[static_cast<std::size_t>(d)]), want) << dtype_name(t) << " on " << d;
    }
  }
}

TEST_P(CommTransport, BroadcastLargeAndFromTheLastDevice) {
  const int last = devices() - 1;
  const std::int64_t n = 3 << 20;  // 12 MB of float32: several chunks / blocks
  Tensor src = filled(n, [](std::int64_t i) { return static_cast<double>(i % 1000); }, DType::float32, Device::cuda(last));
  std::vector<int> order{last};
  for (int d = 0; d < last; ++d) order.push_back(d);
  auto out = comm::broadcast(src, order);
  const auto want = values(src);
  for (auto& t : out) EXPECT_EQ(values(t), want);
}

TEST_P(CommTransport, BroadcastFromTheCpuAndIntoOut) {
  Tensor host = make({1, 2, 3, 4, 5, 6}, DType::float32, Device::cpu(), {2, 3});
  auto out = comm::broadcast(host, all_devices());
  for (int d = 0; d < devices(); ++d) {
    EXPECT_EQ(out[static_cast<std::size_t>(d)].sizes(), (Shape{2, 3}));
    EXPECT_EQ(values(out[static_cast<std::size_t>(d)]), values(host));
  }
  std::vector<Tensor> dst;
  for (int d = 0; d < devices(); ++d) dst.push_back(zeros({2, 3}, device_options(DType::float32, d)));
  Tensor src = host.to(Device::cuda(0));
  auto same = comm::broadcast(src, dst);
  for (std::size_t i = 0; i < dst.size(); ++i) {
    EXPECT_EQ(same[i].data_ptr(), dst[i].data_ptr());
    EXPECT_EQ(values(dst[i]), values(host));
  }
}

TEST_P(CommTransport, BroadcastCoalescedKeepsOrderAcrossDtypes) {
  std::vector<Tensor> ts;
  for (int i = 0; i < 9; ++i) {
    const DType t = i % 3 == 0 ? DType::float32 : i % 3 == 1 ? DType::int64 : DType::float16;
    ts.push_back(filled(100 + i * 37, [&](std::int64_t k) { return static_cast<double>(k + i); }, t, Device::cuda(0))
                     .view({-1}));
  }
  ts.push_back(zeros({4, 5}, device_options(DType::float32, 0)).t());  // not contiguous
  // 1 KiB buffers: several chunks per dtype, and tensors larger than a buffer go alone.
  auto out = comm::broadcast_coalesced(ts, all_devices(), 1024);
  ASSERT_EQ(out.size(), static_cast<std::size_t>(devices()));
  for (std::size_t j = 0; j < ts.size(); ++j) EXPECT_EQ(out[0][j].data_ptr(), ts[j].data_ptr());
  for (int d = 1; d < devices(); ++d) {
    ASSERT_EQ(out[static_cast<std::size_t>(d)].size(), ts.size());
    for (std::size_t j = 0; j < ts.size(); ++j) {
      const Tensor& o = out[static_cast<std::size_t>(d)][j];
      EXPECT_EQ(o.device(), Device::cuda(d));
      EXPECT_EQ(o.sizes(), ts[j].sizes());
      EXPECT_EQ(o.dtype(), ts[j].dtype());
      EXPECT_EQ(values(o), values(ts[j])) << "tensor " << j << " device " << d;
    }
  }
}

TEST_P(CommTransport, ReduceAddEveryDtype) {
  const int n = devices();
  for (DType t : {DType::float32, DType::float16, DType::bfloat16, DType::float64, DType::int64,
                  DType::int32, DType::uint8, DType::bool_, DType::complex64}) {
    if (t == DType::bool_ && GetParam() == comm::Transport::nccl) continue;  // checked below
    std::vector<Tensor> ins;
    for (int d = 0; d < n; ++d) {
      ins.push_back(filled(515, [&](std::int64_t i) { return static_cast<double>((i + d) % 5 == 0); }, t, Device::cuda(d)));
    }
    Tensor sum = comm::reduce_add(ins, n - 1);
    EXPECT_EQ(sum.device(), Device::cuda(n - 1));
    EXPECT_EQ(sum.dtype(), t);
    auto got = values(sum);
    for (std::int64_t i = 0; i < 515; ++i) {
      double want = 0;
      for (int d = 0; d < n; ++d) want += (i + d) % 5 == 0;
      if (t == DType::bool_) want = want > 0;
      ASSERT_EQ(got[static_cast<std::size_t>(i)], want) << dtype_name(t) << " at " << i;
    }
  }
}

TEST_P(CommTransport, ReduceAddBoolIsLogicalOr) {
  std::vector<Tensor> ins;
  for (int d = 0; d < devices(); ++d) ins.push_back(make({1, 0, d == 1 ? 1.0 : 0.0}, DType::bool_, Device::cuda(d)));
  EXPECT_EQ(values(comm::reduce_add(ins, 0)), (std::vector<double>{1, 0, 1}));
}

TEST_P(CommTransport, ReduceAddLargeFloat32) {
  const int n = devices();
  const std::int64_t len = (1 << 22) + 3;  // ragged tail after the vector loop
  std::vector<Tensor> ins;
  for (int d = 0; d < n; ++d) {
    ins.push_back(filled(len, [&](std::int64_t i) { return static_cast<double>((i % 97) * (d + 1)); }, DType::float32, Device::cuda(d)));
  }
  auto got = values(comm::reduce_add(ins, 0));
  const double k = n * (n + 1) / 2.0;
  for (std::int64_t i = 0; i < len; i += 4099) ASSERT_EQ(got[static_cast<std::size_t>(i)], (i % 97) * k) << i;
  ASSERT_EQ(got.back(), ((len - 1) % 97) * k);
}

TEST_P(CommTransport, ReduceAddCoalesced) {
  const int n = devices();
  std::vector<std::vector<Tensor>> ins(static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) {
    for (int j = 0; j < 6; ++j) {
      const DType t = j % 2 ? DType::float64 : DType::int64;
      ins[static_cast<std::size_t>(d)].push_back(
          filled(50 + 20 * j, [&](std::int64_t i) { return static_cast<double>(i * (d + 1)); }, t, Device::cuda(d)));
    }
  }
  auto out = comm::reduce_add_coalesced(ins, 0, 256);
  ASSERT_EQ(out.size(), 6u);
  const double k = n * (n + 1) / 2.0;
  for (int j = 0; j < 6; ++j) {
    const Tensor& o = out[static_cast<std::size_t>(j)];
    EXPECT_EQ(o.device(), Device::cuda(0));
    EXPECT_EQ(o.dtype(), ins[0][static_cast<std::size_t>(j)].dtype());
    auto v = values(o);
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<double>(i) * k);
  }
}

TEST_P(CommTransport, ResultsFollowTheCurrentStreams) {
  // Slow work on the source's current stream writes the values; broadcast and reduce_add must
  // see them without any synchronization by the caller, and return before that work ran.
  Stream s0(0), s1(1);
  StreamGuard g1(s1);
  StreamGuard g0(s0);
  Tensor src = zeros({1000}, device_options(DType::float32, 0));
  Tensor other = full({1000}, Scalar(1.0), device_options(DType::float32, 1));
  s0.launch_host_func([] { std::this_thread::sleep_for(200ms); });
  src.fill_(Scalar(5.0));
  const auto t0 = std::chrono::steady_clock::now();
  auto out = comm::broadcast(src, {0, 1});
  Tensor sum = comm::reduce_add({src, other}, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 150ms) << "no hidden device-wide synchronization";
  s1.sync();  // only device 1's current stream
  EXPECT_EQ(values(out[1])[999], 5.0);
  EXPECT_EQ(values(sum)[0], 6.0);
}

TEST(Comm, ScatterAndGather) {
  if (devices() < 2) GTEST_SKIP() << "needs 2 devices";
  const int n = devices();
  Tensor x = filled(10 * 3, [](std::int64_t i) { return static_cast<double>(i); }, DType::float32, Device::cuda(0)).view({10, 3});
  auto parts = comm::scatter(x, [&] { std::vector<int> d; for (int i = 0; i < n; ++i) d.push_back(i); return d; }());
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].device(), Device::cuda(static_cast<int>(i)));
    rows += parts[i].size(0);
  }
  EXPECT_EQ(rows, 10);
  EXPECT_EQ(parts[0].data_ptr(), x.data_ptr()) << "the part already on its device is a view";
  Tensor back = comm::gather(parts, 0, Device::cuda(n - 1));
  EXPECT_EQ(back.device(), Device::cuda(n - 1));
  EXPECT_EQ(values(back), values(x));
  Tensor host = comm::gather(parts, 0, Device::cpu());
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_EQ(values(host), values(x));
  // chunk sizes along dim 1, with streams
  std::vector<Stream> streams;
  comm::StreamList list;
  for (int i = 0; i < 2; ++i) streams.emplace_back(i);
  list.push_back(streams[1].ref());  // one per destination, in the order of `devices`
  list.push_back(streams[0].ref());
  auto cols = comm::scatter(x, {1, 0}, std::vector<std::int64_t>{1, 2}, 1, list);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].sizes(), (Shape{10, 1}));
  EXPECT_EQ(cols[1].sizes(), (Shape{10, 2}));
  for (auto& s : streams) s.sync();
  EXPECT_EQ(values(cols[0])[1], 3.0);
  Tensor joined = comm::gather({cols[0], cols[1]}, -1, Device::cuda(0));
  EXPECT_EQ(values(joined), values(x));
  // out= forms
  std::vector<Tensor> outs{zeros({4, 3}, device_options(DType::float32, 1)),
                           zeros({6, 3}, device_options(DType::float32, 0))};
  comm::scatter(x, outs, 0);
  EXPECT_EQ(values(outs[1])[0], 12.0);
  Tensor dst = zeros({10, 3}, device_options(DType::float32, 1));
  comm::gather(outs, dst, 0);
  EXPECT_EQ(values(dst), values(x));
  // torch.chunk: 3 rows over 4 devices gives fewer parts
  if (n >= 4) EXPECT_EQ(comm::scatter(x.slice(0, 0, 3), {0, 1, 2, 3}).size(), 3u);
}

TEST(Comm, ReduceAddSingleInputAndDestination) {
  if (devices() < 2) GTEST_SKIP() << "needs 2 devices";
  Tensor a = full({3}, Scalar(2.0), device_options(DType::float32, 1));
  EXPECT_EQ(comm::reduce_add({a}, 1).data_ptr(), a.data_ptr());
  DeviceGuard g(1);
  Tensor b = full({3}, Scalar(3.0), device_options(DType::float32, 0));
  Tensor s = comm::reduce_add({b, a});  // destination: the current device (1)
  EXPECT_EQ(s.device(), Device::cuda(1));
  EXPECT_EQ(values(s)[0], 5.0);
}

TEST(Comm, BadInputChangesNothing) {
  if (devices() < 2) GTEST_SKIP() << "needs 2 devices";
  Tensor a = full({4}, Scalar(1.0), device_options(DType::float32, 0));
  Tensor b = full({4}, Scalar(2.0), device_options(DType::float32, 1));
  Tensor keep0 = full({4}, Scalar(7.0), device_options(DType::float32, 0));
  Tensor keep1 = full({4}, Scalar(7.0), device_options(DType::float32, 1));
  const int n = devices();
  EXPECT_THROW(comm::broadcast(a, {0, 0}), ValueError);                 // duplicate
  EXPECT_THROW(comm::broadcast(a, {0, n}), ValueError);                 // out of range
  EXPECT_THROW(comm::broadcast(a, std::vector<int>{-1}), ValueError);
  EXPECT_THROW(comm::broadcast(a, std::vector<int>{}), ValueError);
  EXPECT_THROW(comm::broadcast(a, {keep1, zeros({4})}), ValueError);    // out on the CPU
  EXPECT_THROW(comm::broadcast(a, {keep1, zeros({5}, device_options(DType::float32, 0))}), ValueError);
  EXPECT_THROW(comm::broadcast(a, {keep1, zeros({4}, device_options(DType::int32, 0))}), ValueError);
  EXPECT_THROW(comm::broadcast_coalesced({a, b}, {0, 1}), ValueError);  // b is not on devices[0]
  EXPECT_THROW(comm::reduce_add({a, zeros({5}, device_options(DType::float32, 1))}), ValueError);
  EXPECT_THROW(comm::reduce_add({a, zeros({4}, device_options(DType::int32, 1))}), ValueError);
  EXPECT_THROW(comm::reduce_add({a, keep0}), ValueError);               // one device twice
  EXPECT_THROW(comm::reduce_add({a, zeros({4})}), ValueError);          // CPU input
  if (n >= 3) EXPECT_THROW(comm::reduce_add({a, b}, 2), ValueError);    // destination holds none
  EXPECT_THROW(comm::reduce_add({a, b}, n), ValueError);
  EXPECT_THROW(comm::reduce_add_coalesced({{a, a}, {b}}, 0), ValueError);
  EXPECT_THROW(comm::scatter(a, {0, 1}, std::vector<std::int64_t>{1, 2}), ValueError);  // sum 3 != 4
  EXPECT_THROW(comm::scatter(a, {0, 1}, std::vector<std::int64_t>{5, -1}), ValueError);
  EXPECT_THROW(comm::scatter(a, {0, 1}, std::vector<std::int64_t>{4}), ValueError);     // lengths
  EXPECT_THROW(comm::scatter(a, {0, 1}, std::nullopt, 1), ValueError);                  // dim
  {
    Stream s1(1);
    comm::StreamList wrong{s1.ref(), std::nullopt};  // stream of device 1 for device 0
    EXPECT_THROW(comm::scatter(a, {0, 1}, std::nullopt, 0, wrong), ValueError);
  }
  EXPECT_THROW(comm::scatter(a, {keep0, zeros({3}, device_options(DType::float32, 1))}), ValueError);
  EXPECT_THROW(comm::scatter(a, {keep0, zeros({2})}), ValueError);      // out on the CPU
  EXPECT_THROW(comm::gather({a, zeros({4, 1}, device_options(DType::float32, 1))}), ValueError);
  EXPECT_THROW(comm::gather({a, zeros({4})}), ValueError);              // CPU input
  EXPECT_THROW(comm::gather({a, b}, keep1), ValueError);                // out shape
  EXPECT_THROW(comm::gather({a, b}, 0, Device::cuda(n)), ValueError);
  EXPECT_THROW(comm::gather(std::vector<Tensor>{}), ValueError);
  EXPECT_EQ(values(keep0), std::vector<double>(4, 7.0));
  EXPECT_EQ(values(keep1), std::vector<double>(4, 7.0));
  EXPECT_EQ(values(a), std::vector<double>(4, 1.0));
  EXPECT_EQ(values(b), std::vector<double>(4, 2.0));
}

TEST(Comm, TransportSetting) {
  EXPECT_EQ(comm::transport(), comm::Transport::automatic);
  comm::set_transport(comm::Transport::copy);
  EXPECT_EQ(comm::transport(), comm::Transport::copy);
  EXPECT_STREQ(comm::transport_name(comm::transport()), "copy");
  comm::set_transport(comm::Transport::automatic);
  if (devices() < 2) return;
  // int16 cannot be reduced by NCCL: a forced nccl transport says so.
  comm::set_transport(comm::Transport::nccl);
  Tensor a = zeros({4}, device_options(DType::int16, 0)), b = zeros({4}, device_options(DType::int16, 1));
  EXPECT_THROW(comm::reduce_add({a, b}, 0), NotSupportedError);
  comm::set_transport(comm::Transport::automatic);
  EXPECT_NO_THROW(comm::reduce_add({a, b}, 0));
}

// The ops executor orders a device tensor's work on that device's stream even when another
// device is current (a null legacy-stream handle names the current device's stream).
TEST(Comm, OpsOnANonCurrentDeviceUseItsStream) {
  if (devices() < 2) GTEST_SKIP() << "needs 2 devices";
  DeviceGuard cur(0);
  Tensor t = zeros({1 << 16}, device_options(DType::float32, 1));
  current_stream(1).sync();
  // Device 0's stream is busy: a fill wrongly queued there would run late.
  current_stream(0).launch_host_func([] { std::this_thread::sleep_for(300ms); });
  t.fill_(Scalar(3.0));
  Stream other(1);
  other.wait(current_stream(1));  // the fill, if it is where it belongs
  StreamGuard g(other);
  EXPECT_EQ(values(t)[0], 3.0);
}
