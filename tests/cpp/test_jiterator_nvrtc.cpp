// The jiterator's device code through NVRTC, without a GPU: every kind of generated kernel
// (linear / strided, 32- / 64-bit indices, vector widths, all dtypes, complex, multi-output,
// every scalar parameter type) must compile for sm_90 — the H200's architecture — wherever
// libnvrtc is installed. Running them needs a GPU (test_jiterator.cpp on the cuda backend,
// scripts/gpu-check.sh). Also: the NVRTC target choice and the identity record that lets a
// warm start skip loading NVRTC.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#if defined(CUDAKIT_WITH_CUDA)
#include "backend/cuda/nvrtc.hpp"
#endif
#include "jiterator/codegen.hpp"
#include "jiterator/parse.hpp"
#include "jiterator/spec.hpp"

using namespace cudakit;

#if defined(CUDAKIT_WITH_CUDA)
namespace {

namespace cu = cudakit::detail::cuda;

#define REQUIRE_NVRTC()                                                              \
  if (!cu::nvrtc().lib.available()) GTEST_SKIP() << cu::nvrtc().lib.reason()

bool contains(const std::vector<char>& image, const std::string& s) {
  return std::search(image.begin(), image.end(), s.begin(), s.end()) != image.end();
}

void expect_compiles(const std::string& code, const jit::KernelSpec& spec, const char* what) {
  SCOPED_TRACE(what);
  const jit::ParsedCode parsed = jit::parse_code(code);
  const std::string src = jit::generate_source(code, parsed, spec);
  cu::NvrtcOutput out = cu::nvrtc_compile(src, parsed.name, cu::NvrtcTarget{90, true});
  ASSERT_TRUE(out.ok) << out.log << "\n---- source ----\n" << src;
  EXPECT_TRUE(contains(out.image, jit::kernel_symbol(parsed))) << "kernel symbol missing from the CUBIN";
}

jit::KernelSpec spec2(DType a, DType b, DType common) {
  jit::KernelSpec s;
  s.nin = 2;
  s.inputs[0] = a;
  s.inputs[1] = b;
  s.common = common;
  s.vec = 4;
  s.unroll = 4;
  return s;
}

}  // namespace

TEST(JiteratorNvrtc, EveryKernelShapeCompilesForSm90) {
  REQUIRE_NVRTC();
  const std::string add = "template <typename T> T add(T x, T y) { return x + y; }";
  jit::KernelSpec s = spec2(DType::float32, DType::float32, DType::float32);
  expect_compiles(add, s, "linear f32 vec4");
  s.contiguous = false;
  expect_compiles(add, s, "strided f32 32-bit");
  s.index64 = true;
  expect_compiles(add, s, "strided f32 64-bit");
  s.contiguous = true;
  expect_compiles(add, s, "linear f32 64-bit");
  s = spec2(DType::float16, DType::int64, DType::float16);
  s.vec = 2;
  expect_compiles(add, s, "half + int64 -> half, vec2");
  s = spec2(DType::bfloat16, DType::bool_, DType::bfloat16);
  s.vec = 8;
  s.contiguous = false;
  expect_compiles(add, s, "bfloat16 + bool strided");
  s = spec2(DType::complex64, DType::float32, DType::complex64);
  s.vec = 2;
  expect_compiles(add, s, "complex64");
  s = spec2(DType::complex128, DType::complex128, DType::complex128);
  s.vec = 1;
  expect_compiles("template <typename T> T f(T x, T y) { return exp(x) * conj(y) + sqrt(x) / abs(y); }", s,
                  "complex128 math");
  for (DType t : {DType::uint8, DType::int8, DType::int16, DType::int32, DType::float64}) {
    s = spec2(t, t, t);
    s.vec = static_cast<std::int8_t>(16 / element_size(t));
    expect_compiles(add, s, dtype_name(t));
  }
}

TEST(JiteratorNvrtc, ParametersMultiOutputAndMathFunctions) {
  REQUIRE_NVRTC();
  jit::KernelSpec s = spec2(DType::float32, DType::float32, DType::float32);
  s.nparams = 4;
  s.params[0] = Scalar::Kind::floating;
  s.params[1] = Scalar::Kind::integer;
  s.params[2] = Scalar::Kind::boolean;
  s.params[3] = Scalar::Kind::floating;
  expect_compiles(
      "template <typename T> T util(T x, T y) { return ::sin(x) + std::cos(y) + ::expf(x) + "
      "std::tanh(y) + ::erf(x) + std::max(x, y) + ::min(x, y) + std::fabs(x) + ::isnan(x); }\n"
      "template <typename T> T f(T x, T y, T a, T b, T c, T d) {"
      " return c ? ::min(d, util(x, y)) * a : b; }",
      s, "params of every kind, CUDA math");
  s.nout = 3;
  s.return_by_ref = true;
  s.contiguous = false;
  expect_compiles(
      "template <typename T> void f(T x, T y, T a, T b, T c, T d, T& o0, T& o1, T& o2) {"
      " o0 = x * a; o1 = y * b; o2 = c ? d : x; }",
      s, "three outputs by reference, strided");
  jit::KernelSpec m;
  m.nin = 8;
  m.nout = 8;
  m.return_by_ref = true;
  m.vec = 4;
  m.unroll = 1;
  for (int i = 0; i < 8; ++i) m.inputs[i] = DType::float32;
  m.nparams = jiterator::kMaxParams;
  for (int j = 0; j < m.nparams; ++j) m.params[j] = Scalar::Kind::complex;
  m.common = DType::complex64;
  std::string params, body;
  for (int i = 0; i < 8; ++i) params += "T x" + std::to_string(i) + ", ";
  for (int j = 0; j < m.nparams; ++j) params += "T p" + std::to_string(j) + ", ";
  for (int k = 0; k < 8; ++k) {
    params += "T& o" + std::to_string(k) + (k < 7 ? ", " : "");
    body += "o" + std::to_string(k) + " = x" + std::to_string(k) + " * p" + std::to_string(k) + "; ";
  }
  m.contiguous = false;
  expect_compiles("template <typename T> void widest(" + params + ") { " + body + "}", m,
                  "8 inputs, 8 outputs, 32 complex parameters (largest parameter block)");
}

TEST(JiteratorNvrtc, TargetsExactArchitectureOrFallsBackToPtx) {
  const std::vector<int> archs = {75, 80, 86, 89, 90, 100, 120};
  cu::NvrtcTarget t = cu::nvrtc_target(archs, 90);
  EXPECT_EQ(t.arch, 90);
  EXPECT_TRUE(t.cubin);
  t = cu::nvrtc_target(archs, 130);  // a device newer than NVRTC: PTX the driver compiles
  EXPECT_EQ(t.arch, 120);
  EXPECT_FALSE(t.cubin);
  t = cu::nvrtc_target(archs, 87);
  EXPECT_EQ(t.arch, 86);
  EXPECT_FALSE(t.cubin);
  EXPECT_THROW(cu::nvrtc_target(archs, 70), NotSupportedError);
}

TEST(JiteratorNvrtc, CompileErrorsComeBackWithTheLog) {
  REQUIRE_NVRTC();
  cu::NvrtcOutput out = cu::nvrtc_compile("#line 1 \"jiterator_code\"\nextern \"C\" __global__ void k() { nope(); }",
                                          "bad", cu::NvrtcTarget{90, true});
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.log.find("jiterator_code(1)"), std::string::npos) << out.log;
  EXPECT_NE(out.log.find("nope"), std::string::npos) << out.log;
}

TEST(JiteratorNvrtc, IdentityRecordIsReusedAndInvalidated) {
  REQUIRE_NVRTC();
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudakit-nvrtc-id-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  ASSERT_NE(::mkdtemp(buf.data()), nullptr);
  const std::string dir = buf.data();
  const cu::NvrtcIdentity first = cu::nvrtc_identity(dir);
  EXPECT_EQ(first.version, cu::nvrtc().lib.version());
  EXPECT_EQ(first.archs, cu::nvrtc().archs);
  EXPECT_NE(first.file.find("size="), std::string::npos);
  std::string record;
  {
    std::ifstream in(dir + "/nvrtc.identity");
    record.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(record.find("version=" + first.version), std::string::npos) << record;
  // Read back from the record.
  const cu::NvrtcIdentity again = cu::nvrtc_identity(dir);
  EXPECT_EQ(again.version, first.version);
  EXPECT_EQ(again.file, first.file);
  // A record that no longer matches the file (NVRTC replaced) is ignored and rewritten.
  {
    std::ofstream out(dir + "/nvrtc.identity", std::ios::trunc);
    std::string stale = record;
    stale.replace(stale.find("version=") + 8, first.version.size(), "9.9");
    stale.replace(stale.find("size="), 5, "size=1");
    out << stale;
  }
  const cu::NvrtcIdentity fixed = cu::nvrtc_identity(dir);
  EXPECT_EQ(fixed.version, first.version);
  std::ifstream in(dir + "/nvrtc.identity");
  std::string rewritten(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(rewritten, record);
  std::remove((dir + "/nvrtc.identity").c_str());
  ::rmdir(dir.c_str());
}

#else
TEST(JiteratorNvrtc, BuiltWithoutCuda) { GTEST_SKIP() << "built without the CUDA headers"; }
#endif
