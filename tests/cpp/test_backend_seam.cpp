// The seam's contract on whichever backend CUDAKIT_BACKEND selects (ctest: emulated; the GPU
// check runs the same file on cuda): capabilities, stream ids, GEMM, vendor handles, the
// optional-library report, and the library loader every backend uses.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/library_loader.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/libraries.hpp"
#include "cudakit/stream.hpp"
#include "kernels/numeric.hpp"

namespace ck = cudakit;
namespace cd = cudakit::detail;

namespace {

cd::Backend& B() { return cd::backend(); }

#define REQUIRE_DEVICE()                                                             \
  do {                                                                               \
    if (B().device_count() == 0) GTEST_SKIP() << "no device: " << B().unavailable_reason(); \
  } while (0)

// Device buffer of `bytes`, uploaded from / downloaded to host vectors on the legacy stream.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : p(B().mem_alloc(0, n)), bytes(n) {}
  ~DeviceBuffer() { B().mem_free(0, p); }
  template <class T>
  void upload(const std::vector<T>& v) {
    B().memcpy_async(p, v.data(), v.size() * sizeof(T), nullptr);
    B().stream_synchronize(nullptr);
  }
  template <class T>
  std::vector<T> download(std::size_t n) {
    std::vector<T> v(n);
    B().memcpy_async(v.data(), p, n * sizeof(T), nullptr);
    B().stream_synchronize(nullptr);
    return v;
  }
};

// Column-major reference: C[m x n] = op(A) op(B).
std::vector<double> reference(bool ta, bool tb, int m, int n, int k, const std::vector<double>& a,
                              int lda, const std::vector<double>& b, int ldb) {
  std::vector<double> c(static_cast<std::size_t>(m) * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        double av = ta ? a[static_cast<std::size_t>(i) * lda + p] : a[static_cast<std::size_t>(p) * lda + i];
        double bv = tb ? b[static_cast<std::size_t>(p) * ldb + j] : b[static_cast<std::size_t>(j) * ldb + p];
        acc += av * bv;
      }
      c[static_cast<std::size_t>(j) * m + i] = acc;
    }
  return c;
}

}  // namespace

// ---------------------------------------------------------------- capabilities

TEST(BackendSeam, CapabilitiesDescribeTheBackend) {
  cd::BackendCapabilities c = B().capabilities();
  // The two backends are the two corners of the record; no other combination exists today.
  if (c.runs_kernels) {
    EXPECT_FALSE(c.host_addressable_device_memory);
    EXPECT_TRUE(c.vendor_math_handles);
    EXPECT_TRUE(c.cross_process_ipc);
    EXPECT_TRUE(c.hardware_telemetry);
  } else {
    EXPECT_TRUE(c.host_addressable_device_memory);
    EXPECT_FALSE(c.vendor_math_handles);
    EXPECT_FALSE(c.cross_process_ipc);
    EXPECT_FALSE(c.hardware_telemetry);
  }
  // Fixed for the process: callers may cache it.
  cd::BackendCapabilities again = B().capabilities();
  EXPECT_EQ(again.runs_kernels, c.runs_kernels);
  EXPECT_EQ(again.host_addressable_device_memory, c.host_addressable_device_memory);
}

// ---------------------------------------------------------------- stream ids

TEST(BackendSeam, StreamIdsAreUniqueAndNeverReused) {
  REQUIRE_DEVICE();
  std::set<std::uint64_t> seen;
  std::vector<cd::StreamHandle> streams;
  for (int i = 0; i < 16; ++i) {
    streams.push_back(B().stream_create(0, 0, cd::kStreamNonBlocking));
    std::uint64_t id = B().stream_id(streams.back());
    EXPECT_EQ(B().stream_id(streams.back()), id);  // stable
    EXPECT_TRUE(seen.insert(id).second) << "duplicate stream id " << id;
  }
  // Destroyed streams' ids are not handed out again (a handle value may be).
  for (cd::StreamHandle s : streams) B().stream_destroy(s);
  for (int i = 0; i < 16; ++i) {
    cd::StreamHandle s = B().stream_create(0, 0, cd::kStreamNonBlocking);
    EXPECT_TRUE(seen.insert(B().stream_id(s)).second) << "stream id reused";
    B().stream_destroy(s);
  }
  // The default stream has an id of its own, per device.
  ck::DeviceGuard guard(0);
  const std::uint64_t legacy0 = B().stream_id(nullptr);
  EXPECT_FALSE(seen.count(legacy0));
  EXPECT_EQ(B().stream_id(nullptr), legacy0);
  if (B().device_count() > 1) {
    ck::DeviceGuard g1(1);
    EXPECT_NE(B().stream_id(nullptr), legacy0);
  }
}

TEST(BackendSeam, StreamRefIdComesFromTheBackend) {
  REQUIRE_DEVICE();
  ck::Stream a(0), b(0);
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(a.id(), B().stream_id(a.handle()));
  EXPECT_NE(ck::default_stream(0).id(), a.id());
  EXPECT_TRUE(a.is_done());
}

// ---------------------------------------------------------------- GEMM

TEST(BackendSeam, GemmFloat64AndFloat32AllTransposes) {
  REQUIRE_DEVICE();
  const int m = 7, n = 5, k = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1;  // padded leading dimensions
      std::vector<double> a(static_cast<std::size_t>(lda) * (ta ? m : k)),
          b(static_cast<std::size_t>(ldb) * (tb ? k : n));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 13) * 0.25 - 1.0;
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(i % 7) * 0.5 - 1.5;
      const std::vector<double> want = reference(ta, tb, m, n, k, a, lda, b, ldb);

      DeviceBuffer da(a.size() * 8), db(b.size() * 8), dc(std::size_t(m) * n * 8);
      da.upload(a);
      db.upload(b);
      cd::GemmArgs g;
      g.type = cd::GemmType::float64;
      g.transpose_a = ta; g.transpose_b = tb;
      g.m = m; g.n = n; g.k = k;
      g.a = da.p; g.lda = lda; g.b = db.p; g.ldb = ldb; g.c = dc.p; g.ldc = m;
      B().gemm(0, nullptr, g);
      std::vector<double> got = dc.download<double>(std::size_t(m) * n);
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << ta << tb << i;

      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
      da.upload(af);
      db.upload(bf);
      g.type = cd::GemmType::float32;
      B().gemm(0, nullptr, g);
      std::vector<float> gotf = dc.download<float>(std::size_t(m) * n);
      for (std::size_t i = 0; i < gotf.size(); ++i) EXPECT_NEAR(gotf[i], want[i], 1e-4) << i;
    }
}

TEST(BackendSeam, GemmHalfAndBFloat16AccumulateInFloat32) {
  REQUIRE_DEVICE();
  using ck::ops::BFloat16;
  using ck::ops::Half;
  const int m = 4, n = 3, k = 64;
  std::vector<double> a(std::size_t(m) * k), b(std::size_t(k) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = (i % 5) * 0.125;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = (i % 3) * 0.5;
  const std::vector<double> want = reference(false, false, m, n, k, a, m, b, k);
  for (cd::GemmType type : {cd::GemmType::float16, cd::GemmType::bfloat16}) {
    auto to16 = [&](const std::vector<double>& v) {
      std::vector<std::uint16_t> out;
      for (double x : v)
        out.push_back(type == cd::GemmType::float16 ? Half::from_float(float(x)).x
                                                    : BFloat16::from_float(float(x)).x);
      return out;
    };
    DeviceBuffer da(a.size() * 2), db(b.size() * 2), dc(std::size_t(m) * n * 2);
    da.upload(to16(a));
    db.upload(to16(b));
    cd::GemmArgs g;
    g.type = type;
    g.m = m; g.n = n; g.k = k;
    g.a = da.p; g.lda = m; g.b = db.p; g.ldb = k; g.c = dc.p; g.ldc = m;
    B().gemm(0, nullptr, g);
    std::vector<std::uint16_t> got = dc.download<std::uint16_t>(std::size_t(m) * n);
    for (std::size_t i = 0; i < got.size(); ++i) {
      float v = type == cd::GemmType::float16 ? Half{got[i]}.to_float() : BFloat16{got[i]}.to_float();
      // Inputs and sums are exact in float32 (multiples of 1/16 below 2^8): only the final
      // rounding to 16 bits differs from the reference.
      EXPECT_NEAR(v, want[i], std::abs(want[i]) * (type == cd::GemmType::float16 ? 1e-3 : 8e-3)) << i;
    }
  }
}

TEST(BackendSeam, GemmTf32RoundsInputsWhenAllowed) {
  REQUIRE_DEVICE();
  // a = 1 + 2^-20 is not a TF32 value (10 mantissa bits): TF32 reads it as 1.
  const float a = 1.0f + std::ldexp(1.0f, -20), one = 1.0f;
  DeviceBuffer da(4), db(4), dc(4);
  da.upload(std::vector<float>{a});
  db.upload(std::vector<float>{one});
  cd::GemmArgs g;
  g.m = g.n = g.k = 1;
  g.a = da.p; g.lda = 1; g.b = db.p; g.ldb = 1; g.c = dc.p; g.ldc = 1;
  B().gemm(0, nullptr, g);
  EXPECT_EQ(dc.download<float>(1)[0], a);  // full float32 by default
  g.allow_tf32 = true;
  B().gemm(0, nullptr, g);
  const float tf32 = dc.download<float>(1)[0];
  if (!B().capabilities().runs_kernels) {
    EXPECT_EQ(tf32, one);  // the emulated backend always rounds, as the tensor cores do
  } else {
    EXPECT_TRUE(tf32 == one || tf32 == a) << tf32;  // cuBLAS may pick a non-TF32 kernel
  }
}

TEST(BackendSeam, GemmEmptySumIsZeroAndBadLeadingDimensionsAreRefused) {
  REQUIRE_DEVICE();
  DeviceBuffer dc(4 * 6);
  dc.upload(std::vector<float>(6, 7.0f));
  cd::GemmArgs g;
  g.m = 2; g.n = 3; g.k = 0;
  g.lda = 2; g.ldb = 1; g.c = dc.p; g.ldc = 2;
  DeviceBuffer dummy(4);
  g.a = g.b = dummy.p;
  B().gemm(0, nullptr, g);
  EXPECT_EQ(dc.download<float>(6), std::vector<float>(6, 0.0f));
  g.k = 1;
  g.ldc = 1;  // < m
  EXPECT_THROW(B().gemm(0, nullptr, g), ck::Error);
}

TEST(BackendSeam, GemmKeepsOperandsAliveUntilItRan) {
  REQUIRE_DEVICE();
  struct Flag {
    std::atomic<bool>* released = nullptr;
    ~Flag() { released->store(true); }
  };
  std::atomic<bool> released{false};
  auto owner = std::make_shared<Flag>();
  owner->released = &released;
  DeviceBuffer da(4), db(4), dc(4);
  da.upload(std::vector<float>{2.0f});
  db.upload(std::vector<float>{3.0f});
  cd::StreamHandle s = B().stream_create(0, 0, cd::kStreamNonBlocking);
  std::atomic<bool> go{false};
  B().launch_host_task(s, [&go] { while (!go.load()) std::this_thread::yield(); });
  cd::GemmArgs g;
  g.m = g.n = g.k = 1;
  g.a = da.p; g.lda = 1; g.b = db.p; g.ldb = 1; g.c = dc.p; g.ldc = 1;
  g.keep_alive = std::move(owner);
  B().gemm(0, s, std::move(g));
  if (B().capabilities().host_addressable_device_memory) {
    EXPECT_FALSE(released.load());  // the product has not run yet: its owner is still held
  }
  go = true;
  B().stream_synchronize(s);
  EXPECT_TRUE(released.load());
  B().stream_destroy(s);
  EXPECT_EQ(dc.download<float>(1)[0], 6.0f);
}

TEST(BackendSeam, VendorHandlesOrAClearRefusal) {
  REQUIRE_DEVICE();
  ck::DeviceGuard guard(0);
  if (B().capabilities().vendor_math_handles) {
    void* h = nullptr;
    try {
      h = B().blas_handle(0);
    } catch (const ck::NotSupportedError& e) {
      GTEST_SKIP() << "cuBLAS not loadable here: " << e.what();
    }
    EXPECT_NE(h, nullptr);
    EXPECT_EQ(B().blas_handle(0), h);  // per thread: the same handle again
    void* other = nullptr;
    std::thread([&] { other = B().blas_handle(0); }).join();
    EXPECT_NE(other, h);
    EXPECT_EQ(ck::current_blas_handle(), h);
    EXPECT_NE(ck::current_solver_handle(), nullptr);
  } else {
    for (auto call : {+[] { ck::current_blas_handle(); }, +[] { ck::current_solver_handle(); }}) {
      try {
        call();
        ADD_FAILURE() << "no NotSupportedError";
      } catch (const ck::NotSupportedError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("current_"), std::string::npos) << msg;  // names the call
        EXPECT_NE(msg.find(B().name()), std::string::npos) << msg;  // and the backend
      }
    }
  }
}

// ---------------------------------------------------------------- optional libraries

TEST(BackendSeam, OptionalLibrariesReportEachOneFoundOrWhyNot) {
  const std::vector<ck::LibraryInfo> libs = ck::optional_libraries();
  ASSERT_FALSE(libs.empty());
  std::set<std::string> names;
  for (const ck::LibraryInfo& l : libs) {
    EXPECT_FALSE(l.name.empty());
    EXPECT_TRUE(names.insert(l.name).second) << "listed twice: " << l.name;
    if (l.found) {
      EXPECT_TRUE(l.reason.empty()) << l.name << ": " << l.reason;
      EXPECT_FALSE(l.path.empty()) << l.name;
    } else {
      EXPECT_FALSE(l.reason.empty()) << l.name << " missing without a reason";
    }
  }
  if (B().capabilities().vendor_math_handles) {
    for (const char* expected : {"CUDA driver", "NVML", "cuBLAS", "cuSOLVER", "cuBLASLt"})
      EXPECT_TRUE(names.count(expected)) << expected;
  } else {
    // The emulated backend's matmul library (CBLAS / OpenBLAS), found or explained.
    EXPECT_TRUE(names.count("OpenBLAS") || names.count("CBLAS"));
  }
  EXPECT_EQ(ck::optional_libraries().size(), libs.size());  // probing twice is harmless
}

// ---------------------------------------------------------------- the loader

namespace {
using CosFn = double(double);
std::string libm_version(const cd::LoadedLibrary& l) {
  return l.symbol("cos") ? "hook ran" : "hook ran before the library loaded";
}
}  // namespace

TEST(LibraryLoader, OpensTheFirstLoadableSonameAndResolvesTheTable) {
  CosFn* cos_fn = nullptr;
  CosFn* sin_fn = nullptr;
  CosFn* absent = reinterpret_cast<CosFn*>(0x1);
  cd::LoadedLibrary lib = cd::load_library(
      {"libm", {"libcudakit-no-such-library.so.7", "libm.so.6"}, "install libm", &libm_version},
      {cd::bind_symbol("cos", cos_fn), cd::bind_symbol("sin", sin_fn),
       cd::bind_symbol("cudakit_no_such_symbol", absent, /*required=*/false)});
  ASSERT_TRUE(lib.available()) << lib.reason();
  EXPECT_EQ(lib.soname(), "libm.so.6");
  EXPECT_NE(lib.path().find("libm"), std::string::npos) << lib.path();
  EXPECT_EQ(lib.version(), "hook ran");  // the hook ran after the table resolved
  ASSERT_NE(cos_fn, nullptr);
  EXPECT_DOUBLE_EQ(cos_fn(0.0), 1.0);
  EXPECT_DOUBLE_EQ(sin_fn(0.0), 0.0);
  EXPECT_EQ(absent, nullptr);  // optional and missing: null, and still available
  EXPECT_NE(lib.symbol("tan"), nullptr);
  ck::LibraryInfo info = lib.info();
  EXPECT_TRUE(info.found);
  EXPECT_EQ(info.name, "libm");
  EXPECT_EQ(info.soname, "libm.so.6");
}

TEST(LibraryLoader, ReportsAMissingLibraryWithoutThrowing) {
  CosFn* fn = nullptr;
  cd::LoadedLibrary lib = cd::load_library(
      {"Nothing", {"libcudakit-no-such-library.so.1", "libcudakit-no-such-library.so"},
       "install the nothing runtime"},
      {cd::bind_symbol("cos", fn)});
  EXPECT_FALSE(lib.available());
  EXPECT_TRUE(lib.soname().empty());
  EXPECT_NE(lib.reason().find("Nothing not found"), std::string::npos) << lib.reason();
  EXPECT_NE(lib.reason().find("libcudakit-no-such-library.so.1"), std::string::npos);
  EXPECT_NE(lib.reason().find("install the nothing runtime"), std::string::npos);
  EXPECT_FALSE(lib.open_error().empty());
  EXPECT_EQ(lib.symbol("cos"), nullptr);
  try {
    cd::throw_library_unavailable(lib, "matmul");
    ADD_FAILURE();
  } catch (const ck::NotSupportedError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("matmul: Nothing not found", 0), 0u) << e.what();
  }
}

TEST(LibraryLoader, AMissingRequiredSymbolMakesTheLibraryUnavailable) {
  CosFn* cos_fn = nullptr;
  CosFn* missing = nullptr;
  cd::LoadedLibrary lib = cd::load_library(
      {"libm", {"libm.so.6"}, "hint"},
      {cd::bind_symbol("cos", cos_fn), cd::bind_symbol("cudakit_required_but_absent", missing)});
  EXPECT_FALSE(lib.available());
  EXPECT_EQ(lib.soname(), "libm.so.6");  // it loaded, but is not usable
  EXPECT_NE(lib.reason().find("cudakit_required_but_absent"), std::string::npos) << lib.reason();
  EXPECT_FALSE(lib.info().found);
}
