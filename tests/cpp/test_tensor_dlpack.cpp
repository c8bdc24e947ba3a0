// DLPack conversions in C++: round trips keep storage and strides, deleters run exactly
// once, unsupported inputs are rejected with clear errors (and still released).
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.hpp"
#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;
namespace dl = cudakit::dlpack;

TEST(DLPack, HostRoundTripVersionedAndLegacy) {
  Tensor a = arange(Scalar(0), Scalar(12), Scalar(1), TensorOptions{DType::int32}).view({3, 4}).t();
  auto* v = dl::to_dlpack_versioned(a);
  EXPECT_EQ(v->version.major, 1u);
  EXPECT_EQ(v->dl_tensor.device.device_type, dl::kDLCPU);
  EXPECT_EQ(v->dl_tensor.dtype.code, dl::kDLInt);
  EXPECT_EQ(v->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(v->dl_tensor.strides[0], 1);
  EXPECT_EQ(v->dl_tensor.strides[1], 4);
  Tensor b = dl::from_dlpack(v);
  EXPECT_EQ(b.data_ptr(), a.data_ptr());
  EXPECT_EQ(b.sizes(), a.sizes());
  EXPECT_EQ(b.strides(), a.strides());
  Tensor c = dl::from_dlpack(dl::to_dlpack(b));
  EXPECT_EQ(c.data_ptr(), a.data_ptr());
  EXPECT_EQ(c.select(0, 1).select(0, 2).item().i, 9);  // a[1][2] = original[2][1]
}

TEST(DLPack, DeviceTensorsAreKDLCUDA) {
  if (detail::backend().device_count() == 0) GTEST_SKIP() << "no device";
  Tensor d = zeros({5}, TensorOptions{DType::bfloat16, Device::cuda(0)});
  auto* m = dl::to_dlpack(d);
  EXPECT_EQ(m->dl_tensor.device.device_type, dl::kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 0);
  EXPECT_EQ(m->dl_tensor.dtype.code, dl::kDLBfloat);
  Tensor back = dl::from_dlpack(m);
  EXPECT_TRUE(back.is_cuda());
  EXPECT_EQ(back.dtype(), DType::bfloat16);
}

namespace {
int g_deleted = 0;
std::int64_t g_shape[1] = {4};
float g_data[4] = {1, 2, 3, 4};
}  // namespace

TEST(DLPack, ForeignDeleterRunsOnceAndOnErrors) {
  auto make = [](dl::DLDataType dt, dl::DLDeviceType dev) {
    auto* m = new dl::DLManagedTensor{};
    m->dl_tensor = dl::DLTensor{g_data, {dev, 0}, 1, dt, g_shape, nullptr, 0};
    m->deleter = [](dl::DLManagedTensor* self) { ++g_deleted; delete self; };
    return m;
  };
  g_deleted = 0;
  {
    Tensor t = dl::from_dlpack(make({dl::kDLFloat, 32, 1}, dl::kDLCPU));
    Tensor view = t.slice(0, 1, 3);
    t = Tensor();
    EXPECT_EQ(g_deleted, 0);  // the view keeps the foreign buffer alive
    EXPECT_EQ(view.select(0, 0).item().d, 2.0);
  }
  EXPECT_EQ(g_deleted, 1);
  EXPECT_THROW(dl::from_dlpack(make({dl::kDLFloat, 32, 4}, dl::kDLCPU)), ValueError);  // lanes
  EXPECT_THROW(dl::from_dlpack(make({dl::kDLFloat, 8, 1}, dl::kDLCPU)), ValueError);   // float8
  EXPECT_THROW(dl::from_dlpack(make({dl::kDLFloat, 32, 1}, dl::kDLVulkan)), ValueError);
  EXPECT_EQ(g_deleted, 4);  // rejected tensors are still released
}
