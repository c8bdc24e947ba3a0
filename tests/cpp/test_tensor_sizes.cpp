// Size arithmetic is checked everywhere a shape becomes elements or bytes (factories, views,
// reshape, expand, from_blob, DLPack import): an impossible size is an error carrying the
// requested size, never a smaller allocation. Also: item() on any one-element shape, the
// comparison and pow ops, and the device checks of events, streams and allocations.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <complex>
#include <cstring>
#include <string>
#include <vector>

#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;
namespace dl = cudakit::dlpack;

namespace {

bool have_device() { return device_count() > 0; }

// Runs `f`, expects exception E whose message contains `fragment`; returns the exception.
template <class E, class F>
E expect_throw(F&& f, const std::string& fragment) {
  try {
    f();
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    throw;
  }
  ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  throw std::runtime_error("no exception");
}

std::vector<double> values(const Tensor& t) {
  Tensor h = t.to(Device::cpu(), DType::float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

std::vector<bool> bools(const Tensor& t) {
  Tensor h = t.to(Device::cpu()).contiguous();
  return std::vector<bool>(h.data<bool>(), h.data<bool>() + h.numel());
}

Tensor host_i64(std::vector<std::int64_t> v) {
  Tensor t = empty({static_cast<std::int64_t>(v.size())}, TensorOptions{DType::int64});
  std::memcpy(t.data_ptr(), v.data(), v.size() * 8);
  return t;
}

constexpr std::int64_t k62 = std::int64_t{1} << 62;
constexpr std::int64_t k40 = std::int64_t{1} << 40;

}  // namespace

TEST(TensorSizes, FactoriesRejectImpossibleShapes) {
  // 2**62 float32 elements = 2**64 bytes: no allocation can hold it (not a 0-byte tensor).
  auto oom = expect_throw<OutOfMemoryError>([] { empty({k62}); }, "18446744073709551616 bytes");
  EXPECT_EQ(oom.requested_bytes(), SIZE_MAX);  // saturated: the exact size is in the message
  expect_throw<OutOfMemoryError>([] { zeros({k62}); }, "Tried to allocate");
  expect_throw<OutOfMemoryError>([] { empty({std::int64_t{1} << 61}, TensorOptions{DType::float32}); }, "2**63-1 bytes");
  // 2**80 elements: the shape itself cannot exist.
  expect_throw<ValueError>([] { empty({k40, k40}); }, "1208925819614629174706176 elements");
  expect_throw<ValueError>([] { empty({3, -1}); }, "negative dimension -1");
  expect_throw<ValueError>([] { ones({-5}); }, "negative dimension");
  expect_throw<ValueError>([] { contiguous_strides({0, k62, k62}); }, "strides overflow");
  // Empty tensors with huge other dims are fine (no bytes), as long as strides fit.
  EXPECT_EQ(empty({0, k40}).numel(), 0);
}

TEST(TensorSizes, DeviceFactoriesLeaveAllocatorUntouched) {
  if (!have_device()) GTEST_SKIP() << "no device";
  const std::size_t before = memory_allocated(0);
  const auto stats_before = memory_stats_of(0).num_ooms;
  EXPECT_THROW(zeros({k62}, device_options()), OutOfMemoryError);
  EXPECT_THROW(empty({k40, k40}, device_options()), ValueError);
  EXPECT_EQ(memory_allocated(0), before);
  EXPECT_EQ(memory_stats_of(0).num_ooms, stats_before);  // rejected before the allocator
  Tensor ok = ones({4}, device_options());
  EXPECT_EQ(values(ok), (std::vector<double>{1, 1, 1, 1}));
}

TEST(TensorSizes, StridedFactoriesAndViews) {
  expect_throw<OutOfMemoryError>([] { empty_strided({2, 2}, {k62, 1}); }, "Tried to allocate");
  expect_throw<ValueError>([] { empty_strided({2, 2}, {LLONG_MAX, 1}); }, "beyond 64 bits");
  expect_throw<ValueError>([] { empty_strided({2}, {-1}); }, "negative stride");
  Tensor t = arange(Scalar(0), Scalar(12), Scalar(1), TensorOptions{DType::float32});
  expect_throw<ValueError>([&] { t.view({k62, k62}); }, "elements");
  expect_throw<ValueError>([&] { t.reshape({-2, 6}); }, "negative size -2");
  expect_throw<ValueError>([&] { t.view({5, -1}); }, "invalid for input of size 12");
  expect_throw<ValueError>([&] { t.as_strided({2}, {LLONG_MAX}, 0); }, "more than any memory can hold");
  expect_throw<ValueError>([&] { t.as_strided({3}, {LLONG_MAX}, 0); }, "beyond 64 bits");
  expect_throw<ValueError>([&] { t.as_strided({4}, {4}, 0); }, "out of bounds");
  expect_throw<ValueError>([&] { t.as_strided({2}, {1}, LLONG_MAX); }, "out of bounds");
  Tensor one = ones({1});
  expect_throw<ValueError>([&] { one.expand({k40, k40}); }, "elements");
  expect_throw<ValueError>([&] { one.expand({-2}); }, "invalid size -2");
  expect_throw<ValueError>([&] { one.expand({-1, 3}); }, "new leading dimension");
  EXPECT_EQ(one.expand({k62 / 8}).numel(), k62 / 8);  // a broadcast view: no memory behind it
  expect_throw<ValueError>([&] { one.expand({k62}); }, "nbytes over 2**63-1");  // nbytes() must fit
  // The constructor is the choke point: no view can reach outside its storage.
  auto storage = Storage::allocate(16, Device::cpu());
  expect_throw<ValueError>([&] { Tensor(storage, DType::float32, {5}, {1}, 0); }, "out of bounds");
  expect_throw<ValueError>([&] { Tensor(storage, DType::float32, {2}, {1}, -1); }, "out of bounds");
  EXPECT_EQ(Tensor(storage, DType::float32, {4}, {1}, 0).numel(), 4);
}

TEST(TensorSizes, FromBlobChecksAndReleasesOnce) {
  float data[4] = {1, 2, 3, 4};
  int released = 0;
  expect_throw<ValueError>(
      [&] { from_blob(data, {2, 2}, {LLONG_MAX, LLONG_MAX}, DType::float32, Device::cpu(), false, [&] { ++released; }); },
      "beyond 64 bits");
  EXPECT_EQ(released, 1);  // released even though the import failed
  {
    Tensor r = from_blob(data + 3, {4}, {-1}, DType::float32, Device::cpu(), false, [&] { ++released; });
    EXPECT_EQ(values(r), (std::vector<double>{4, 3, 2, 1}));  // negative strides reach below data
  }
  EXPECT_EQ(released, 2);
}

namespace {
int g_deleted = 0;
float g_buf[8] = {};
std::int64_t g_shape[2];
std::int64_t g_strides[2];

dl::DLManagedTensor* foreign(std::int64_t s0, std::int64_t s1, std::int64_t st0, std::int64_t st1) {
  g_shape[0] = s0;
  g_shape[1] = s1;
  g_strides[0] = st0;
  g_strides[1] = st1;
  auto* m = new dl::DLManagedTensor{};
  m->dl_tensor = dl::DLTensor{g_buf, {dl::kDLCPU, 0}, 2, {dl::kDLFloat, 32, 1}, g_shape, g_strides, 0};
  m->deleter = [](dl::DLManagedTensor* self) {
    ++g_deleted;
    delete self;
  };
  return m;
}
}  // namespace

TEST(TensorSizes, DLPackImportRejectsHugeStrides) {
  g_deleted = 0;
  // Span of (2-1)*2**62 + 1 + 1 elements of 4 bytes > 2**64: no wrapped-around small span.
  expect_throw<ValueError>([] { dl::from_dlpack(foreign(2, 2, k62, 1)); }, "18446744073709551624 bytes");
  expect_throw<ValueError>([] { dl::from_dlpack(foreign(2, 2, LLONG_MAX, LLONG_MAX)); }, "beyond 64 bits");
  expect_throw<ValueError>([] { dl::from_dlpack(foreign(2, -3, 1, 1)); }, "negative size -3");
  expect_throw<ValueError>([] { dl::from_dlpack(foreign(k40, k40, 0, 0)); }, "elements");
  auto* null_shape = foreign(2, 2, 2, 1);
  null_shape->dl_tensor.shape = nullptr;
  expect_throw<ValueError>([&] { dl::from_dlpack(null_shape); }, "shape is NULL");
  EXPECT_EQ(g_deleted, 5);  // every rejected import was released exactly once
  {
    Tensor ok = dl::from_dlpack(foreign(2, 2, 2, 1));
    EXPECT_EQ(ok.numel(), 4);
  }
  EXPECT_EQ(g_deleted, 6);
}

TEST(TensorSizes, ArangeCountsAreChecked) {
  expect_throw<ValueError>([] { arange(Scalar(0.0), Scalar(INFINITY), Scalar(1.0), TensorOptions{DType::float32}); },
                           "finite");
  expect_throw<ValueError>([] { arange(Scalar(0), Scalar(10), Scalar(0), TensorOptions{DType::int64}); }, "nonzero");
  expect_throw<ValueError>([] { arange(Scalar(0), Scalar(-5), Scalar(1), TensorOptions{DType::int64}); }, "step sign");
  expect_throw<OutOfMemoryError>(
      [] { arange(Scalar(0), Scalar(static_cast<long long>(k62)), Scalar(1), TensorOptions{DType::int64}); },
      "Tried to allocate");
  // Extreme int64 bounds: exact, no overflow in the count or the values.
  Tensor e = arange(Scalar(static_cast<long long>(LLONG_MIN)), Scalar(static_cast<long long>(LLONG_MIN) + 3), Scalar(1),
                    TensorOptions{DType::int64});
  ASSERT_EQ(e.numel(), 3);
  EXPECT_EQ(e.data<std::int64_t>()[2], LLONG_MIN + 2);
  EXPECT_EQ(values(arange(Scalar(10), Scalar(0), Scalar(-3), TensorOptions{DType::int64})),
            (std::vector<double>{10, 7, 4, 1}));
}

TEST(TensorItem, AnyOneElementShape) {
  EXPECT_EQ(full({1}, Scalar(7), TensorOptions{DType::int32}).item().i, 7);
  EXPECT_EQ(full({1, 1, 1}, Scalar(2.5), TensorOptions{DType::float64}).item().d, 2.5);
  Tensor t = arange(Scalar(0), Scalar(6), Scalar(1), TensorOptions{DType::int64});
  EXPECT_EQ(t.slice(0, 4, 5).item().i, 4);          // offset view of shape [1]
  EXPECT_EQ(t.view({2, 3}).slice(1, 2, 3).slice(0, 1, 2).item().i, 5);
  expect_throw<ValueError>([&] { t.item(); }, "a Tensor with 6 elements cannot be converted to Scalar");
  if (have_device()) {
    Tensor d = full({1, 1}, Scalar(3), device_options(DType::int16));
    EXPECT_EQ(d.item().i, 3);
  }
}

class CompareAndPow : public ::testing::TestWithParam<bool> {
 protected:
  Device dev() const { return GetParam() ? Device::cuda(0) : Device::cpu(); }
  void SetUp() override {
    if (GetParam() && !have_device()) GTEST_SKIP() << "no device";
  }
  Tensor arr(std::vector<std::int64_t> v, DType t) { return host_i64(std::move(v)).to(dev(), t); }
};

TEST_P(CompareAndPow, ComparisonsBroadcastAndPromote) {
  Tensor a = arr({1, 2, 3}, DType::int32);
  Tensor b = arr({1, 3}, DType::int64).view({2, 1});
  Tensor eqab = eq(a, b);
  EXPECT_EQ(eqab.dtype(), DType::bool_);
  EXPECT_EQ(eqab.sizes(), (Shape{2, 3}));
  EXPECT_EQ(bools(eqab), (std::vector<bool>{true, false, false, false, false, true}));
  EXPECT_EQ(bools(lt(a, Scalar(2))), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(bools(ge(a, Scalar(2.5))), (std::vector<bool>{false, false, true}));  // compared as float
  EXPECT_EQ(bools(ne(a, a)), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(bools(gt(a, b)), (std::vector<bool>{false, true, true, false, false, false}));
  EXPECT_EQ(bools(le(b, a)), (std::vector<bool>{true, true, true, false, false, true}));
  Tensor f = full({2}, Scalar(NAN), TensorOptions{DType::float32, dev()});
  EXPECT_EQ(bools(ne(f, f)), (std::vector<bool>{true, true}));  // NaN != NaN
  EXPECT_EQ(bools(eq(f, f)), (std::vector<bool>{false, false}));
  Tensor c = full({2}, Scalar(std::complex<double>(1, 2)), TensorOptions{DType::complex64, dev()});
  EXPECT_EQ(bools(eq(c, Scalar(std::complex<double>(1, 2)))), (std::vector<bool>{true, true}));
  expect_throw<ValueError>([&] { lt(c, c); }, "complex");
  expect_throw<ValueError>([&] { eq(a, arr({1, 2}, DType::int32)); }, "broadcast");
}

TEST_P(CompareAndPow, PowIntegerFloatComplex) {
  Tensor a = arr({-2, -1, 0, 1, 2, 3}, DType::int64);
  EXPECT_EQ(values(pow(a, Scalar(3))), (std::vector<double>{-8, -1, 0, 1, 8, 27}));
  EXPECT_EQ(pow(a, Scalar(3)).dtype(), DType::int64);
  // torch's integer results for negative exponents in a tensor: 1, +-1, else 0.
  Tensor neg = arr({-1, -1, -1, -1, -2, -3}, DType::int64);
  EXPECT_EQ(values(pow(a, neg)), (std::vector<double>{0, -1, 0, 1, 0, 0}));
  expect_throw<ValueError>([&] { pow(a, Scalar(-1)); }, "Integers to negative integer powers are not allowed");
  EXPECT_EQ(values(pow(Scalar(2), arr({0, 1, 10}, DType::int32))), (std::vector<double>{1, 2, 1024}));
  // Wrap-around like torch's integer arithmetic (no UB): 3**40 mod 2**64, as int64.
  EXPECT_EQ(pow(arr({3}, DType::int64), Scalar(40)).item().i, static_cast<std::int64_t>(12157665459056928801ull));
  Tensor x = arr({1, 4, 9}, DType::float32);
  EXPECT_EQ(values(pow(x, Scalar(0.5))), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(pow(arr({1, 2}, DType::int32), Scalar(0.5)).dtype(), DType::float32);  // promoted
  EXPECT_EQ(values(pow(arr({2}, DType::float16), arr({10}, DType::float16))), (std::vector<double>{1024}));
  Tensor c = full({1}, Scalar(std::complex<double>(1, 1)), TensorOptions{DType::complex64, dev()});
  Tensor c2 = pow(c, Scalar(2)).to(Device::cpu());
  EXPECT_EQ(c2.data<std::complex<float>>()[0], std::complex<float>(0, 2));  // exact, as NumPy
  Tensor ch = pow(c, Scalar(0.5)).to(Device::cpu());
  EXPECT_NEAR(std::abs(ch.data<std::complex<float>>()[0] - std::complex<float>(1.0986841f, 0.4550899f)), 0, 1e-5);
  Tensor bt = full({2}, Scalar(true), TensorOptions{DType::bool_, dev()});
  expect_throw<ValueError>([&] { pow(bt, bt); }, "bool");
  EXPECT_EQ(values(pow(bt, Scalar(2))), (std::vector<double>{1, 1}));  // bool ** int -> int64
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, CompareAndPow, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "device" : "host"; });

TEST(DeviceChecks, StreamsAndEventsOfAnotherDevice) {
  if (device_count() < 2) GTEST_SKIP() << "needs 2 devices";
  StreamRef s1 = stream_from_pool(1);
  expect_throw<ValueError>([&] { caching_allocator_alloc(256, 0, s1); }, "stream belongs to device 1");
  expect_throw<ValueError>([&] { caching_allocator_alloc(0, 0, s1); }, "stream belongs to device 1");
  Tensor t = ones({4}, device_options(DType::float32, 0));
  expect_throw<ValueError>([&] { t.record_stream(s1); }, "stream is on cuda:1");
  t.record_stream(stream_from_pool(0));  // same device: fine
  Event a(EventOptions{true, false, false}), b(EventOptions{true, false, false});
  a.record(stream_from_pool(0));
  b.record(s1);
  b.sync();
  a.sync();
  expect_throw<ValueError>([&] { a.elapsed_time(b); }, "same device");
  Event c(EventOptions{true, false, false});
  c.record(stream_from_pool(0));
  c.sync();
  EXPECT_GE(a.elapsed_time(c), 0.0f);
}

TEST(DeviceStrings, ParseIsStrict) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  for (const char* bad : {"gpu", "cuda:", "cuda:1x", "cuda:-1", "cuda:99999999999", "CUDA:0", "cuda:0 "})
    expect_throw<ValueError>([&] { Device::parse(bad); }, "Invalid device string");
  if (have_device()) EXPECT_EQ(Device::parse("cuda:0").index, 0);
}
