// Tensor core on the emulated backend (and host): dtypes, promotion, views, copies, ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/tensor.hpp"
#include "kernels/elementwise.hpp"

using namespace cudakit;

namespace {
bool have_device() { return detail::backend().device_count() > 0; }
std::vector<double> to_vec(const Tensor& t) {
  Tensor h = t.to(Device::cpu(), DType::float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}
Tensor host_f32(std::vector<float> v, Shape s) {
  Tensor t = empty(s, TensorOptions{DType::float32});
  std::memcpy(t.data_ptr(), v.data(), v.size() * 4);
  return t;
}
}  // namespace

TEST(TensorDType, PromotionTable) {
  EXPECT_EQ(promote_types(DType::uint8, DType::int8), DType::int16);
  EXPECT_EQ(promote_types(DType::uint8, DType::int32), DType::int32);
  EXPECT_EQ(promote_types(DType::bool_, DType::float16), DType::float16);
  EXPECT_EQ(promote_types(DType::int64, DType::float16), DType::float16);
  EXPECT_EQ(promote_types(DType::float16, DType::bfloat16), DType::float32);
  EXPECT_EQ(promote_types(DType::complex64, DType::float64), DType::complex128);
  EXPECT_EQ(promote_types(DType::complex64, DType::float32), DType::complex64);
  EXPECT_EQ(promote_types(DType::int32, DType::complex64), DType::complex64);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b)
      EXPECT_EQ(promote_types(DType(a), DType(b)), promote_types(DType(b), DType(a)));
  EXPECT_EQ(dtype_from_name("torch.float32"), DType::float32);
  EXPECT_EQ(dtype_from_name("half"), DType::float16);
  EXPECT_FALSE(dtype_from_name("float128").has_value());
}

TEST(TensorDType, ResultTypeWithScalarsAndZeroDim) {
  Tensor i32 = zeros({3}, TensorOptions{DType::int32});
  Tensor f16 = zeros({3}, TensorOptions{DType::float16});
  EXPECT_EQ(result_type(i32, Scalar(2)), DType::int32);       // int scalar doesn't widen
  EXPECT_EQ(result_type(i32, Scalar(2.5)), DType::float32);   // category up: default float
  EXPECT_EQ(result_type(f16, Scalar(2.5)), DType::float16);
  EXPECT_EQ(result_type(i32, zeros({}, TensorOptions{DType::int64})), DType::int32);
  EXPECT_EQ(result_type(i32, zeros({}, TensorOptions{DType::float64})), DType::float64);
  EXPECT_EQ(result_type(f16, zeros({}, TensorOptions{DType::float64})), DType::float16);
  EXPECT_EQ(result_type(f16, zeros({1}, TensorOptions{DType::float64})), DType::float64);
}

TEST(TensorHalf, RoundTripAndRounding) {
  using ops::Half;
  using ops::BFloat16;
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.96e-08f, 1e-3f, 3.14159f}) {
    float back = Half::from_float(f).to_float();
    EXPECT_NEAR(back, f, std::fabs(f) * 1e-3 + 6e-8) << f;
  }
  EXPECT_TRUE(std::isinf(Half::from_float(70000.f).to_float()));
  EXPECT_EQ(Half::from_float(1.0f + 1.0f / 2048).to_float(), 1.0f);  // tie -> even
  EXPECT_EQ(BFloat16::from_float(1.0f).to_float(), 1.0f);
  EXPECT_EQ(BFloat16::from_float(1.00390625f).to_float(), 1.0f);  // tie -> even
}

TEST(TensorShape, BroadcastAndViewStrides) {
  EXPECT_EQ(broadcast_shapes({3, 1}, {4}), (Shape{3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_THROW(broadcast_shapes({3}, {4}), ValueError);
  EXPECT_EQ(*compute_view_strides({2, 3}, {3, 1}, {6}), (Shape{1}));
  EXPECT_FALSE(compute_view_strides({2, 3}, {1, 2}, {6}).has_value());  // transposed
  EXPECT_EQ(infer_size({-1, 4}, 8), (Shape{2, 4}));
  EXPECT_THROW(infer_size({-1, 3}, 8), ValueError);
}

TEST(TensorViews, ShareStorageHost) {
  Tensor t = arange(Scalar(0), Scalar(6), Scalar(1), TensorOptions{DType::float32});
  Tensor m = t.view({2, 3});
  Tensor tt = m.t();
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.sizes(), (Shape{3, 2}));
  EXPECT_EQ(to_vec(tt), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(tt.view({6}), ValueError);
  EXPECT_EQ(to_vec(tt.reshape({6})), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor col = m.select(1, 1);  // [1, 4]
  col.fill_(Scalar(9));
  EXPECT_EQ(to_vec(t), (std::vector<double>{0, 9, 2, 3, 9, 5}));
  Tensor s = t.slice(0, 1, std::nullopt, 2);  // 9, 3, 5
  EXPECT_EQ(to_vec(s), (std::vector<double>{9, 3, 5}));
  EXPECT_EQ(t.storage(), s.storage());
}

TEST(TensorCopy, AcrossDevicesAndDtypes) {
  if (!have_device()) GTEST_SKIP() << "no device";
  Tensor h = host_f32({1.5f, -2.f, 3.25f, 4.f, 5.f, 6.f}, {2, 3});
  Tensor d = h.to(Device::cuda(0));
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(to_vec(d), to_vec(h));
  Tensor di = d.to(DType::int32);  // on-device cast (truncation)
  EXPECT_EQ(to_vec(di), (std::vector<double>{1, -2, 3, 4, 5, 6}));
  Tensor dt = d.t().contiguous();  // strided device copy
  EXPECT_EQ(to_vec(dt), (std::vector<double>{1.5, 4, -2, 5, 3.25, 6}));
  Tensor back = empty({3, 2}, TensorOptions{DType::float64}).t();  // strided host dst
  back.copy_(d);
  EXPECT_EQ(to_vec(back), to_vec(h));
  if (detail::backend().device_count() > 1) {
    Tensor d1 = d.to(Device::cuda(1));
    EXPECT_EQ(d1.device().index, 1);
    EXPECT_EQ(to_vec(d1), to_vec(h));
  }
  Tensor p = h.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_EQ(to_vec(p), to_vec(h));
}

TEST(TensorOps, ElementwiseBroadcastPromotion) {
  if (!have_device()) GTEST_SKIP() << "no device";
  Device dev = Device::cuda(0);
  Tensor a = host_f32({1, 2, 3}, {3, 1}).to(dev);
  Tensor b = arange(Scalar(0), Scalar(4), Scalar(1), TensorOptions{DType::int64, dev});  // int64 [4]
  Tensor c = a + b;
  EXPECT_EQ(c.dtype(), DType::float32);
  EXPECT_EQ(c.sizes(), (Shape{3, 4}));
  EXPECT_EQ(to_vec(c), (std::vector<double>{1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6}));
  Tensor q = div(b, Scalar(2));
  EXPECT_EQ(q.dtype(), DType::float32);
  EXPECT_EQ(to_vec(q), (std::vector<double>{0, 0.5, 1, 1.5}));
  EXPECT_EQ(to_vec(relu(-(b - Scalar(2)))), (std::vector<double>{2, 1, 0, 0}));
  EXPECT_EQ(sum(c).item().d, 42.0);
  EXPECT_EQ(sum(b).dtype(), DType::int64);
  EXPECT_EQ(sum(b).item().i, 6);
  Tensor x = zeros({4}, TensorOptions{DType::int32, dev});
  add_(x, b);
  EXPECT_EQ(x.dtype(), DType::int32);
  EXPECT_EQ(to_vec(x), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_THROW(add_(x, c.select(0, 0)), ValueError);  // float into int in place
  EXPECT_THROW(a + host_f32({1, 2, 3}, {3}), ValueError);  // cross-device
  EXPECT_THROW(a + zeros({2, 2}, TensorOptions{DType::float32, dev}), ValueError);  // shapes
}

TEST(TensorOps, Matmul) {
  if (!have_device()) GTEST_SKIP() << "no device";
  Device dev = Device::cuda(0);
  Tensor a = host_f32({1, 2, 3, 4, 5, 6}, {2, 3}).to(dev);
  Tensor b = host_f32({1, 0, 0, 1, 1, 1}, {3, 2}).to(dev);
  Tensor c = matmul(a, b);
  EXPECT_EQ(to_vec(c), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_EQ(to_vec(matmul(a, a.t())), (std::vector<double>{14, 32, 32, 77}));
  for (DType t : {DType::float16, DType::bfloat16, DType::float64})
    EXPECT_EQ(to_vec(matmul(a.to(t), b.to(t))), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_THROW(matmul(a, a), ValueError);
  EXPECT_THROW(matmul(a.to(DType::int32), b.to(DType::int32)), ValueError);
}

TEST(TensorOps, FillAllDtypesAndItem) {
  if (!have_device()) GTEST_SKIP() << "no device";
  for (int k = 0; k < kNumDTypes; ++k) {
    DType t = DType(k);
    Tensor x = full({5}, Scalar(1), TensorOptions{t, Device::cuda(0)});
    EXPECT_EQ(x.select(0, 3).item().d, 1.0) << dtype_name(t);
  }
  Tensor big = full({3}, Scalar(static_cast<long long>(9007199254740993LL)), TensorOptions{DType::int64, Device::cuda(0)});
  EXPECT_EQ(big.select(0, 2).item().i, 9007199254740993LL);  // int64 exact
}

// Scalar operands are kernel arguments (issue 24): in-place and out-of-place, on the host and
// on an emulated device, with torch's overflow errors.
TEST(TensorOps, ScalarOperandsInPlaceAndOverflow) {
  std::vector<Device> devices{Device::cpu()};
  if (have_device()) devices.push_back(Device::cuda(0));
  for (const Device& d : devices) {
    Tensor x = zeros({4}, TensorOptions{DType::float32, d});
    add_(x, Scalar(1));
    mul_(x, Scalar(3));
    sub_(x, Scalar(0.5));
    div_(x, Scalar(2));
    EXPECT_EQ(to_vec(x), (std::vector<double>(4, 1.25)));
    EXPECT_EQ(to_vec(rsub(x, Scalar(2))), (std::vector<double>(4, 0.75)));
    EXPECT_EQ(to_vec(pow(Scalar(2), x.to(DType::int32))), (std::vector<double>(4, 2.0)));
    Tensor u = zeros({2}, TensorOptions{DType::uint8, d});
    sub_(u, Scalar(1));  // negative integers wrap for unsigned types, as torch
    EXPECT_EQ(to_vec(u), (std::vector<double>{255, 255}));
    EXPECT_THROW(add_(u, Scalar(300)), Error);
    EXPECT_EQ(to_vec(u), (std::vector<double>{255, 255}));  // state intact
    EXPECT_THROW(full({3}, Scalar(300), TensorOptions{DType::uint8, d}), Error);
    EXPECT_THROW(full({2}, Scalar(std::int64_t{1} << 40), TensorOptions{DType::int32, d}), Error);
    EXPECT_THROW(u.fill_(Scalar(256)), Error);
    Tensor i = zeros({2}, TensorOptions{DType::int32, d});
    EXPECT_THROW(add_(i, Scalar(0.5)), ValueError);  // float result into an int tensor
    EXPECT_EQ(add(i, Scalar(0.5)).dtype(), DType::float32);
    EXPECT_EQ(to_vec(arange(Scalar(1), Scalar(7), Scalar(2), TensorOptions{DType::float16, d})),
              (std::vector<double>{1, 3, 5}));
  }
}
