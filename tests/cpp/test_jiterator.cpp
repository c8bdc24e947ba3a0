// The jiterator (include/cudakit/jiterator.hpp) on the backend under test: the emulated
// backend compiles with the host C++ compiler (CI), the cuda backend with NVRTC
// (scripts/gpu-check.sh). Values are checked against a double-precision reference computed
// here, dtypes and layouts against torch's rules.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/jiterator.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/tensor.hpp"
#include "jiterator/disk_cache.hpp"
#include "jiterator/parse.hpp"
#include "jiterator/spec.hpp"
#include "kernels/numeric.hpp"

using namespace cudakit;
namespace jt = cudakit::jiterator;

namespace {

// A private disk cache for this test binary, set before the cache is first used.
const std::string& test_cache_root() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudakit-jit-test-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const char* made = ::mkdtemp(buf.data());
    std::string d = made ? made : "/tmp";
    ::setenv("CUDAKIT_CACHE_DIR", d.c_str(), 1);
    return d;
  }();
  return dir;
}
[[maybe_unused]] const std::string& g_root = test_cache_root();

bool have_device() { return detail::backend().device_count() > 0; }
#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no device: " << detail::backend().unavailable_reason()

std::vector<double> values(const Tensor& t) {
  Tensor h = t.to(Device::cpu(), DType::float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

// Device tensor of `shape` holding `v` (converted from float64 to `dtype`).
Tensor device_tensor(const std::vector<double>& v, Shape shape, DType dtype = DType::float32) {
  Tensor h = empty(shape, TensorOptions{DType::float64});
  std::memcpy(h.data_ptr(), v.data(), v.size() * sizeof(double));
  return h.to(Device::cuda(0), dtype);
}

std::vector<double> iota_values(std::int64_t n, double start = 0.5, double step = 1.25) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i % 97) - 40.0;
  return v;
}

const char* kAxpy = "template <typename T> T axpy(T x, T y, T a) { return a * x + y; }";

}  // namespace

// ---------------------------------------------------------------- parsing (no device)

TEST(JiteratorParse, EntryIsTheLastTemplateFunction) {
  auto p = jit::parse_code(kAxpy);
  EXPECT_EQ(p.name, "axpy");
  EXPECT_EQ(p.return_type, "T");
  EXPECT_EQ(p.num_params, 3);

  p = jit::parse_code(
      "template <typename T> T util_fn(T x, T y) { return ::sin(x) + ::cos(y); }\n"
      "// a comment with template <typename T> T fake(T x) {\n"
      "template <typename T> T my_kernel(T x, T y, T val) { return ::min(val, util_fn(x, y)); }");
  EXPECT_EQ(p.name, "my_kernel");
  EXPECT_EQ(p.num_params, 3);

  p = jit::parse_code("template <typename T> void two(T a, T b = T(1), T& o0, T& o1) { o0 = a; o1 = b; }");
  EXPECT_EQ(p.name, "two");
  EXPECT_EQ(p.return_type, "void");
  EXPECT_EQ(p.num_params, 4);
  EXPECT_EQ(p.num_defaulted, 1);

  p = jit::parse_code("  template<class T>\nT\nf(void) { return T(1); }");
  EXPECT_EQ(p.name, "f");
  EXPECT_EQ(p.num_params, 0);
}

TEST(JiteratorParse, BadCodeNamesTheExpectedForm) {
  for (const char* bad : {"", "float f(float x) { return x; }", "template <typename T> T f(T x);",
                          "template T f(T x) { return x; }"}) {
    try {
      jit::parse_code(bad);
      ADD_FAILURE() << "parsed: " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("template <typename T> T my_fn"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(jit::text_line("a\nbb\nccc", 2), "bb");
  EXPECT_EQ(jit::text_line("a\nbb", 3), "");
}

TEST(JiteratorCreate, RejectsBadDeclarations) {
  EXPECT_THROW(jt::JitFunction(kAxpy, {}, 2, false), ValueError);  // by value: one output
  EXPECT_THROW(jt::create_multi_output_jit_fn(kAxpy, 0), ValueError);
  EXPECT_THROW(jt::create_multi_output_jit_fn(kAxpy, 9), ValueError);
  EXPECT_THROW(jt::create_multi_output_jit_fn(kAxpy, 2), ValueError);  // returns T, not void
  EXPECT_THROW(jt::create_jit_fn("template <typename T> void f(T x, T& o) { o = x; }"), ValueError);
  EXPECT_THROW(jt::create_jit_fn(kAxpy, {{"a", 1.0}, {"a", 2.0}}), ValueError);
  EXPECT_THROW(jt::create_jit_fn(kAxpy, {{"not a name", 1.0}}), ValueError);
  auto f = jt::create_jit_fn(kAxpy, {{"a", 2.0}});
  EXPECT_EQ(f.name(), "axpy");
  EXPECT_EQ(f.num_outputs(), 1);
  EXPECT_FALSE(f.return_by_ref());
  ASSERT_EQ(f.params().size(), 1u);
  EXPECT_EQ(f.params()[0].name, "a");
  EXPECT_EQ(f.num_kernels(), 0u);  // nothing compiled before the first call
}

// ---------------------------------------------------------------- disk cache (no device)

TEST(JiteratorDiskCache, RoundTripRejectsCorruptAndForeignEntries) {
  const std::string dir = test_cache_root() + "/unit";
  jit::DiskCache cache(dir);
  ASSERT_EQ(cache.dir(), dir) << cache.reason();
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  std::vector<char> image = {'\x7f', 'E', 'L', 'F', 1, 2, 3};
  std::vector<char> got;
  EXPECT_EQ(cache.read("k.ckjit", "key-1", got), jit::DiskCache::Lookup::miss);
  ASSERT_TRUE(cache.write("k.ckjit", "key-1", image));
  EXPECT_EQ(cache.read("k.ckjit", "key-1", got), jit::DiskCache::Lookup::hit);
  EXPECT_EQ(got, image);
  // Same file, another key (a hash collision, or a stale entry): never loaded.
  EXPECT_EQ(cache.read("k.ckjit", "key-2", got), jit::DiskCache::Lookup::rejected);

  // Flip one image byte: the checksum rejects it; a rewrite repairs it.
  {
    std::fstream f(dir + "/k.ckjit", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('X');
  }
  EXPECT_EQ(cache.read("k.ckjit", "key-1", got), jit::DiskCache::Lookup::rejected);
  // Truncated, and not an entry at all.
  { std::ofstream(dir + "/t.ckjit", std::ios::binary) << "CKJIT001"; }
  EXPECT_EQ(cache.read("t.ckjit", "key-1", got), jit::DiskCache::Lookup::rejected);
  { std::ofstream(dir + "/g.ckjit", std::ios::binary) << "garbage garbage garbage garbage garbage"; }
  EXPECT_EQ(cache.read("g.ckjit", "key-1", got), jit::DiskCache::Lookup::rejected);
  ASSERT_TRUE(cache.write("k.ckjit", "key-1", image));
  EXPECT_EQ(cache.read("k.ckjit", "key-1", got), jit::DiskCache::Lookup::hit);
  // No temporary files left behind.
  EXPECT_NE(::access((dir + "/k.ckjit").c_str(), F_OK), -1);
}

TEST(JiteratorDiskCache, RefusesADirectoryOthersCanWrite) {
  const std::string dir = test_cache_root() + "/shared";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  jit::DiskCache cache(dir);
  EXPECT_EQ(cache.dir(), "");
  EXPECT_NE(cache.reason().find("not private"), std::string::npos) << cache.reason();
  std::vector<char> got;
  EXPECT_EQ(cache.read("x", "k", got), jit::DiskCache::Lookup::miss);
  EXPECT_FALSE(cache.write("x", "k", {'a'}));
}

TEST(JiteratorDiskCache, ProcessCacheLivesUnderCudakitCacheDir) {
  EXPECT_EQ(jt::cache_dir(), test_cache_root() + "/jiterator");
}

// ---------------------------------------------------------------- calls

TEST(Jiterator, AxpyWithDefaultAndOverriddenScalar) {
  REQUIRE_DEVICE();
  auto axpy = jt::create_jit_fn(kAxpy, {{"a", 2.0}});
  const auto xv = iota_values(1000), yv = iota_values(1000, 3.0, -0.5);
  Tensor x = device_tensor(xv, {1000}), y = device_tensor(yv, {1000});
  Tensor z = axpy({x, y});
  EXPECT_EQ(z.dtype(), DType::float32);
  EXPECT_EQ(z.sizes(), Shape({1000}));
  EXPECT_TRUE(z.is_cuda());
  auto zv = values(z);
  for (std::size_t i = 0; i < zv.size(); ++i)
    ASSERT_FLOAT_EQ(zv[i], static_cast<float>(2.0f * static_cast<float>(xv[i]) + static_cast<float>(yv[i])));
  // A per-call override reuses the kernel (same scalar type).
  const auto before = axpy.num_kernels();
  zv = values(axpy({x, y}, {{"a", -0.5}}));
  for (std::size_t i = 0; i < zv.size(); ++i) ASSERT_NEAR(zv[i], -0.5 * xv[i] + yv[i], 1e-4);
  EXPECT_EQ(axpy.num_kernels(), before);
  // An int override is another scalar type: one more specialisation, same values.
  zv = values(axpy({x, y}, {{"a", 3}}));
  for (std::size_t i = 0; i < zv.size(); ++i) ASSERT_NEAR(zv[i], 3 * xv[i] + yv[i], 1e-3);
  EXPECT_EQ(axpy.num_kernels(), before + 1);
  EXPECT_THROW(axpy({x, y}, {{"b", 1.0}}), ValueError);
}

TEST(Jiterator, BroadcastingAndPromotionFollowTheBuiltInOps) {
  REQUIRE_DEVICE();
  auto add = jt::create_jit_fn("template <typename T> T add(T x, T y) { return x + y; }");
  const auto av = iota_values(3), bv = iota_values(4, -1.0, 0.75);
  Tensor a = device_tensor(av, {3, 1}, DType::int32), b = device_tensor(bv, {1, 4}, DType::float16);
  Tensor c = add({a, b});
  EXPECT_EQ(c.sizes(), Shape({3, 4}));
  EXPECT_EQ(c.dtype(), result_type(a, b));  // float16
  Tensor ref = cudakit::add(a, b);
  EXPECT_EQ(values(c), values(ref));

  // A 0-d tensor of a higher category promotes; of the same category it does not widen.
  Tensor i16 = device_tensor(iota_values(5), {5}, DType::int16);
  Tensor zero_f64 = device_tensor({0.25}, {}, DType::float64);
  Tensor zero_i64 = device_tensor({7}, {}, DType::int64);
  EXPECT_EQ(add({i16, zero_f64}).dtype(), DType::float64);
  EXPECT_EQ(add({i16, zero_i64}).dtype(), DType::int16);
  EXPECT_EQ(values(add({i16, zero_i64})), values(cudakit::add(i16, zero_i64)));
  EXPECT_THROW(add({device_tensor(iota_values(3), {3}), device_tensor(iota_values(4), {4})}), ValueError);
}

TEST(Jiterator, EveryDtypeMatchesTheBuiltInConversionsBitForBit) {
  REQUIRE_DEVICE();
  auto twice = jt::create_jit_fn("template <typename T> T twice(T x) { return x + x; }");
  const auto v = iota_values(257, -3.3, 0.37);
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType t = static_cast<DType>(d);
    SCOPED_TRACE(dtype_name(t));
    Tensor x = device_tensor(v, {257}, t);
    Tensor y = twice({x});
    EXPECT_EQ(y.dtype(), t);
    if (t == DType::bool_) continue;  // x + x on bool: int 2 -> true; checked below
    Tensor ref = cudakit::add(x, x);
    Tensor yh = y.cpu(), rh = ref.cpu();
    EXPECT_EQ(std::memcmp(yh.data_ptr(), rh.data_ptr(), yh.nbytes()), 0);
  }
  Tensor b = twice({device_tensor({0, 1, 1, 0}, {4}, DType::bool_)});
  EXPECT_EQ(values(b), (std::vector<double>{0, 1, 1, 0}));
  // Mixed input dtypes are converted to the common dtype first (torch): int64 2049 -> half
  // 2048 before the float computation.
  auto sum = jt::create_jit_fn("template <typename T> T sum(T x, T y) { return x + y; }");
  Tensor r = sum({device_tensor({2049}, {1}, DType::int64), device_tensor({0.5}, {1}, DType::float16)});
  EXPECT_EQ(r.dtype(), DType::float16);
  EXPECT_EQ(values(r)[0], 2048.0);
}

TEST(Jiterator, ComplexValuesAndParameters) {
  REQUIRE_DEVICE();
  auto f = jt::create_jit_fn("template <typename T> T f(T x, T w) { return x * w + conj(x); }",
                             {{"w", std::complex<double>(0.5, -2.0)}});
  Tensor h = empty({3}, TensorOptions{DType::complex64});
  auto* p = h.data<ops::Complex64>();
  p[0] = {1, 2};
  p[1] = {-3, 0.5};
  p[2] = {0, 0};
  Tensor y = f({h.cuda()}).cpu();
  ASSERT_EQ(y.dtype(), DType::complex64);
  const std::complex<double> w(0.5, -2.0);
  for (int i = 0; i < 3; ++i) {
    std::complex<double> x(p[i].re, p[i].im), want = x * w + std::conj(x);
    EXPECT_NEAR(y.data<ops::Complex64>()[i].re, want.real(), 1e-5);
    EXPECT_NEAR(y.data<ops::Complex64>()[i].im, want.imag(), 1e-5);
  }
  // A float tensor with a complex parameter stays float (the parameter converts to T):
  // compile error, as in torch, with the compiler's message.
  EXPECT_THROW(f({device_tensor({1.0}, {1})}), jt::CompileError);
}

TEST(Jiterator, MultipleOutputsByReference) {
  REQUIRE_DEVICE();
  auto f = jt::create_multi_output_jit_fn(
      "template <typename T> void sum_diff(T x, T y, T s, T& sum, T& diff) { sum = x + y; "
      "diff = s * (x - y); }",
      2, {{"s", 1.5}});
  const auto xv = iota_values(64), yv = iota_values(64, 7.0, 0.25);
  auto outs = f.run({device_tensor(xv, {8, 8}), device_tensor(yv, {8, 8})});
  ASSERT_EQ(outs.size(), 2u);
  auto s = values(outs[0]), d = values(outs[1]);
  for (std::size_t i = 0; i < s.size(); ++i) {
    ASSERT_NEAR(s[i], xv[i] + yv[i], 1e-4);
    ASSERT_NEAR(d[i], 1.5 * (xv[i] - yv[i]), 1e-4);
  }
  EXPECT_THROW(f({device_tensor(xv, {64}), device_tensor(yv, {64})}), ValueError);  // use run()
  // A single-output multi-output function returns its one tensor (torch).
  auto g = jt::create_multi_output_jit_fn("template <typename T> void neg(T x, T& o) { o = -x; }", 1);
  EXPECT_EQ(values(g({device_tensor({2.0}, {1})})), std::vector<double>{-2.0});
}

TEST(Jiterator, NonContiguousInputsUseTheStridedKernel) {
  REQUIRE_DEVICE();
  auto f = jt::create_jit_fn("template <typename T> T f(T x, T y) { return x * T(10) + y; }");
  const auto av = iota_values(6 * 5 * 4), bv = iota_values(5 * 4, 2.0, 0.5);
  Tensor a = device_tensor(av, {6, 5, 4}), b = device_tensor(bv, {5, 4});
  auto ref = [&](const Tensor& x, const Tensor& y) { return values(cudakit::add(cudakit::mul(x, Scalar(10.0)), y)); };
  // Permuted (dense): the output follows the input's memory order.
  Tensor at = a.permute({2, 0, 1});
  Tensor bt = b.t().unsqueeze(1).expand({4, 6, 5});
  Tensor out = f({at, bt});
  EXPECT_EQ(values(out), ref(at, bt));
  EXPECT_EQ(out.strides(), Shape({1, 20, 4}));
  // Sliced with a step, broadcast (stride 0), and a transposed 2-D view.
  Tensor as = a.slice(0, 1, 6, 2).slice(2, 0, 4, 3);
  EXPECT_EQ(values(f({as, b.slice(1, 0, 4, 3)})), ref(as, b.slice(1, 0, 4, 3)));
  EXPECT_TRUE(f({as, b.slice(1, 0, 4, 3)}).is_contiguous());
  Tensor m = device_tensor(iota_values(35), {5, 7});
  EXPECT_EQ(values(f({m.t(), m.t()})), ref(m.t(), m.t()));
}

TEST(Jiterator, SixtyFourBitIndexPathComputesTheSameValues) {
  REQUIRE_DEVICE();
  auto f = jt::create_jit_fn("template <typename T> T f(T x, T y) { return x - T(2) * y; }");
  Tensor a = device_tensor(iota_values(3 * 7 * 11), {3, 7, 11});
  Tensor b = device_tensor(iota_values(7 * 11, 1.0, 0.3), {7, 11});
  Tensor bt = b.t().unsqueeze(1);  // [11, 1, 7] against [11, 3, 7]
  std::vector<double> strided32 = values(f({a.permute({2, 0, 1}), bt}));
  Tensor c = device_tensor(iota_values(3 * 7 * 11, 4.0, -0.2), {3, 7, 11});
  std::vector<double> linear32 = values(f({a, c}));
  const auto kernels32 = f.num_kernels();  // strided and linear
  EXPECT_EQ(kernels32, 2u);
  jit::set_force_index64(true);
  std::vector<double> strided64 = values(f({a.permute({2, 0, 1}), bt}));
  std::vector<double> linear64 = values(f({a, c}));
  jit::set_force_index64(false);
  EXPECT_EQ(f.num_kernels(), kernels32 + 2);  // the 64-bit specialisations are distinct
  EXPECT_EQ(strided32, strided64);
  EXPECT_EQ(linear32, linear64);
  EXPECT_EQ(strided32, values(cudakit::sub(a.permute({2, 0, 1}), cudakit::mul(bt, Scalar(2.0)))));
}

TEST(Jiterator, BadCallsSayWhatIsWrong) {
  REQUIRE_DEVICE();
  auto axpy = jt::create_jit_fn(kAxpy, {{"a", 2.0}});
  Tensor x = device_tensor({1, 2}, {2});
  auto expect_msg = [](auto fn, const char* part) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one mentioning " << part;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { axpy({}); }, "1 to 8 tensor arguments");
  expect_msg([&] { axpy({x}); }, "takes 3 parameters");
  expect_msg([&] { axpy({x, x.cpu()}); }, "argument 2 is a cpu tensor");
  expect_msg([&] { axpy({x, Tensor()}); }, "undefined");
  expect_msg([&] { axpy({x, x}, {{"alpha", 1.0}}); }, "'alpha' is not a declared parameter (declared: a)");
  if (detail::backend().device_count() > 1) {
    expect_msg([&] { axpy({x, x.cuda(1)}); }, "same device");
  }
}

TEST(Jiterator, CompileErrorCarriesTheCompilerMessageAndTheLine) {
  REQUIRE_DEVICE();
  auto bad = jt::create_jit_fn(
      "template <typename T> T helper(T x) { return x; }\n"
      "template <typename T> T broken(T x) {\n"
      "  return x + undeclared_name;\n"
      "}");
  try {
    bad({device_tensor({1}, {1})});
    FAIL() << "compiled";
  } catch (const jt::CompileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
    EXPECT_NE(what.find("line 3 of the code string:   return x + undeclared_name;"), std::string::npos) << what;
    EXPECT_NE(e.log().find("undeclared_name"), std::string::npos);
  }
  // Still an error on the next call (a failed compile is not cached as success).
  EXPECT_THROW(bad({device_tensor({1}, {1})}), jt::CompileError);
}

TEST(Jiterator, CachesCompiledKernelsAcrossFunctionsAndOnDisk) {
  REQUIRE_DEVICE();
  const std::string code = "template <typename T> T cube(T x) { return x * x * x; }";
  Tensor x = device_tensor({1, 2, 3}, {3}, DType::float64);
  const jt::CacheStats s0 = jt::cache_stats();
  EXPECT_EQ(values(jt::create_jit_fn(code)({x})), (std::vector<double>{1, 8, 27}));
  const jt::CacheStats s1 = jt::cache_stats();
  EXPECT_EQ(s1.compiles + s1.disk_hits, s0.compiles + s0.disk_hits + 1);
  // Another function with the same code finds the kernel in memory.
  EXPECT_EQ(values(jt::create_jit_fn(code)({x})), (std::vector<double>{1, 8, 27}));
  const jt::CacheStats s2 = jt::cache_stats();
  EXPECT_EQ(s2.compiles, s1.compiles);
  EXPECT_EQ(s2.memory_hits, s1.memory_hits + 1);
  // The compile went to the disk cache (an entry named after the function).
  bool found = false;
  const std::string dir = jt::cache_dir();
  for (int attempt = 0; attempt < 1 && !dir.empty(); ++attempt) {
    std::string cmd;
    if (FILE* p = ::popen(("ls " + dir).c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) found = found || std::string(buf).rfind("cube-", 0) == 0;
      ::pclose(p);
    }
  }
  EXPECT_TRUE(found) << "no cube-*.ckjit entry in " << dir;
}

TEST(Jiterator, ConcurrentFirstCallsCompileOnce) {
  REQUIRE_DEVICE();
  auto f = jt::create_jit_fn("template <typename T> T sq_plus(T x, T c) { return x * x + c; }", {{"c", 1.0}});
  Tensor x = device_tensor(iota_values(100), {100});
  const jt::CacheStats s0 = jt::cache_stats();
  std::vector<std::thread> threads;
  std::vector<std::vector<double>> results(6);
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] { results[static_cast<std::size_t>(t)] = values(f({x})); });
  for (auto& th : threads) th.join();
  const jt::CacheStats s1 = jt::cache_stats();
  EXPECT_EQ(s1.compiles + s1.disk_hits, s0.compiles + s0.disk_hits + 1);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

TEST(Jiterator, RunsOnTheCurrentStream) {
  REQUIRE_DEVICE();
  auto f = jt::create_jit_fn("template <typename T> T inc(T x) { return x + T(1); }");
  Stream s(0);
  Tensor x;
  {
    StreamGuard g(s);
    x = zeros({1 << 16}, device_options());
    for (int i = 0; i < 5; ++i) x = f({x});
  }
  s.sync();
  auto v = values(x);
  EXPECT_EQ(v.front(), 5.0);
  EXPECT_EQ(v.back(), 5.0);
}

TEST(Jiterator, MisalignedViewsAndPartialTilesGiveTheSameValues) {
  REQUIRE_DEVICE();
  // Offsets of 1..3 elements break 16-byte alignment (the vector width drops); sizes around
  // one tile of the contiguous kernel (128 threads x 4 vectors x 4 floats) cover full tiles,
  // the partial last tile and arrays smaller than a tile.
  auto f = jt::create_jit_fn("template <typename T> T f(T x, T y, T a) { return a * x + y; }", {{"a", 0.25}});
  const std::int64_t tile = 128 * 4 * 4;
  Tensor big = device_tensor(iota_values(3 * tile + 8), {3 * tile + 8});
  Tensor other = device_tensor(iota_values(3 * tile + 8, 9.0, -0.125), {3 * tile + 8});
  for (std::int64_t offset : {0, 1, 2, 3}) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{37}, tile - 1, tile, tile + 5, 2 * tile + 7}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + " n " + std::to_string(n));
      Tensor x = big.slice(0, offset, offset + n), y = other.slice(0, 3 - offset, 3 - offset + n);
      auto got = values(f({x, y}));
      auto xv = values(x), yv = values(y);
      ASSERT_EQ(got.size(), static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_FLOAT_EQ(got[i], static_cast<float>(0.25f * static_cast<float>(xv[i]) + static_cast<float>(yv[i])));
    }
  }
}

TEST(Jiterator, RunsOnEveryDeviceFromAnyCurrentDevice) {
  REQUIRE_DEVICE();
  if (detail::backend().device_count() < 2) GTEST_SKIP() << "needs two devices";
  auto f = jt::create_jit_fn("template <typename T> T f(T x) { return x * x; }");
  Tensor x0 = device_tensor({1, 2, 3}, {3});
  Tensor x1 = x0.cuda(1);
  EXPECT_EQ(values(f({x0})), (std::vector<double>{1, 4, 9}));
  std::vector<double> from_thread;
  std::thread t([&] {
    set_device(0);  // the kernel's module belongs to device 1: the launch switches
    Tensor y = f({x1});
    EXPECT_EQ(y.device().index, 1);
    from_thread = values(y);
  });
  t.join();
  EXPECT_EQ(from_thread, (std::vector<double>{1, 4, 9}));
  EXPECT_EQ(f.num_kernels(), 2u);  // one specialisation per device
}
