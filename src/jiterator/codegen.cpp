#include "jiterator/codegen.hpp"

#include <sstream>
#include <string_view>

namespace cudakit::jit {

extern const char* const kNumericSource;  // src/kernels/numeric.hpp (cmake/EmbedText.cmake)

namespace {

// What both compilers see first. NVRTC has no standard headers: the shim gives numeric.hpp the
// few std names it uses and user code the std:: math names; the host gets the real headers plus
// CUDA's global ::min / ::max, which device code may call.
constexpr std::string_view kPrologue = R"CK(// cudakit jiterator kernel (generated; see src/jiterator/codegen.cpp)
#if defined(__CUDACC_RTC__)
namespace std {
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
template <class T, T v> struct integral_constant { static constexpr T value = v; };
typedef integral_constant<bool, true> true_type;
typedef integral_constant<bool, false> false_type;
template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class A, class B> inline constexpr bool is_same_v = is_same<A, B>::value;
using ::abs; using ::acos; using ::acosh; using ::asin; using ::asinh; using ::atan;
using ::atan2; using ::atanh; using ::cbrt; using ::ceil; using ::copysign; using ::cos;
using ::cosh; using ::erf; using ::erfc; using ::exp; using ::exp2; using ::expm1; using ::fabs;
using ::floor; using ::fma; using ::fmax; using ::fmin; using ::fmod; using ::hypot;
using ::lgamma; using ::log; using ::log10; using ::log1p; using ::log2; using ::max;
using ::min; using ::pow; using ::remainder; using ::round; using ::sin; using ::sinh;
using ::sqrt; using ::tan; using ::tanh; using ::tgamma; using ::trunc;
using ::isnan; using ::isinf; using ::isfinite;
}  // namespace std
using std::int8_t; using std::int16_t; using std::int32_t; using std::int64_t;
using std::uint8_t; using std::uint16_t; using std::uint32_t; using std::uint64_t;
#define CK_JIT_FN __device__ __forceinline__
#define CK_JIT_UNROLL _Pragma("unroll")
#else
#include <math.h>  // ::sin(float) ... as CUDA has them; brings std::min / std::max too
#include <cstdint>
#include <type_traits>
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return b < a ? b : a; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }
#define CK_JIT_FN inline
#define CK_JIT_UNROLL
#endif
)CK";

// A complex type user code can compute with (numeric.hpp's Complex is a storage type without
// arithmetic). Emitted only when a complex dtype or parameter is involved: it costs NVRTC time.
constexpr std::string_view kComplex = R"CK(
namespace ck_jit {
template <class R> struct id { typedef R type; };
template <class R> struct complex {
  R re_, im_;
  CK_JIT_FN constexpr complex(R re = R(), R im = R()) : re_(re), im_(im) {}
  template <class U> CK_JIT_FN constexpr complex(const complex<U>& o)
      : re_(static_cast<R>(o.real())), im_(static_cast<R>(o.imag())) {}
  CK_JIT_FN constexpr R real() const { return re_; }
  CK_JIT_FN constexpr R imag() const { return im_; }
  CK_JIT_FN complex& operator+=(const complex& o) { re_ += o.re_; im_ += o.im_; return *this; }
  CK_JIT_FN complex& operator-=(const complex& o) { re_ -= o.re_; im_ -= o.im_; return *this; }
  CK_JIT_FN complex& operator*=(const complex& o) { return *this = *this * o; }
  CK_JIT_FN complex& operator/=(const complex& o) { return *this = *this / o; }
  friend CK_JIT_FN complex operator+(const complex& a, const complex& b) { return complex(a.re_ + b.re_, a.im_ + b.im_); }
  friend CK_JIT_FN complex operator-(const complex& a, const complex& b) { return complex(a.re_ - b.re_, a.im_ - b.im_); }
  friend CK_JIT_FN complex operator*(const complex& a, const complex& b) {
    return complex(a.re_ * b.re_ - a.im_ * b.im_, a.re_ * b.im_ + a.im_ * b.re_);
  }
  friend CK_JIT_FN complex operator/(const complex& a, const complex& b) {
    const R d = b.re_ * b.re_ + b.im_ * b.im_;
    return complex((a.re_ * b.re_ + a.im_ * b.im_) / d, (a.im_ * b.re_ - a.re_ * b.im_) / d);
  }
  friend CK_JIT_FN complex operator+(const complex& a, typename id<R>::type b) { return a + complex(b); }
  friend CK_JIT_FN complex operator-(const complex& a, typename id<R>::type b) { return a - complex(b); }
  friend CK_JIT_FN complex operator*(const complex& a, typename id<R>::type b) { return complex(a.re_ * b, a.im_ * b); }
  friend CK_JIT_FN complex operator/(const complex& a, typename id<R>::type b) { return complex(a.re_ / b, a.im_ / b); }
  friend CK_JIT_FN complex operator+(typename id<R>::type a, const complex& b) { return complex(a) + b; }
  friend CK_JIT_FN complex operator-(typename id<R>::type a, const complex& b) { return complex(a) - b; }
  friend CK_JIT_FN complex operator*(typename id<R>::type a, const complex& b) { return complex(a * b.re_, a * b.im_); }
  friend CK_JIT_FN complex operator/(typename id<R>::type a, const complex& b) { return complex(a) / b; }
  friend CK_JIT_FN complex operator-(const complex& a) { return complex(-a.re_, -a.im_); }
  friend CK_JIT_FN complex operator+(const complex& a) { return a; }
  friend CK_JIT_FN bool operator==(const complex& a, const complex& b) { return a.re_ == b.re_ && a.im_ == b.im_; }
  friend CK_JIT_FN bool operator!=(const complex& a, const complex& b) { return !(a == b); }
};
template <class R> CK_JIT_FN R real(const complex<R>& z) { return z.real(); }
template <class R> CK_JIT_FN R imag(const complex<R>& z) { return z.imag(); }
template <class R> CK_JIT_FN complex<R> conj(const complex<R>& z) { return complex<R>(z.real(), -z.imag()); }
template <class R> CK_JIT_FN R norm(const complex<R>& z) { return z.real() * z.real() + z.imag() * z.imag(); }
template <class R> CK_JIT_FN R abs(const complex<R>& z) { return ::hypot(z.real(), z.imag()); }
template <class R> CK_JIT_FN R arg(const complex<R>& z) { return ::atan2(z.imag(), z.real()); }
template <class R> CK_JIT_FN complex<R> polar(R r, R theta) { return complex<R>(r * ::cos(theta), r * ::sin(theta)); }
template <class R> CK_JIT_FN complex<R> exp(const complex<R>& z) { return polar(R(::exp(z.real())), z.imag()); }
template <class R> CK_JIT_FN complex<R> log(const complex<R>& z) { return complex<R>(::log(abs(z)), arg(z)); }
template <class R> CK_JIT_FN complex<R> sqrt(const complex<R>& z) {
  const R r = ::sqrt(abs(z));
  const R t = arg(z) / R(2);
  return complex<R>(r * ::cos(t), r * ::sin(t));
}
template <class R> CK_JIT_FN complex<R> sin(const complex<R>& z) {
  return complex<R>(::sin(z.real()) * ::cosh(z.imag()), ::cos(z.real()) * ::sinh(z.imag()));
}
template <class R> CK_JIT_FN complex<R> cos(const complex<R>& z) {
  return complex<R>(::cos(z.real()) * ::cosh(z.imag()), -::sin(z.real()) * ::sinh(z.imag()));
}
template <class R> CK_JIT_FN complex<R> pow(const complex<R>& a, const complex<R>& b) { return exp(b * log(a)); }
template <class R> CK_JIT_FN complex<R> pow(const complex<R>& a, typename id<R>::type b) { return exp(complex<R>(b) * log(a)); }
// Storage <-> computation.
template <class R> CK_JIT_FN cudakit::ops::Complex<R> arith(complex<R> v) { return {v.real(), v.imag()}; }
template <class R> CK_JIT_FN complex<R> to_compute(cudakit::ops::Complex<R> v) { return complex<R>(v.re, v.im); }
}  // namespace ck_jit
)CK";

// Conversions between storage and computation, on top of numeric.hpp's convert<D>.
constexpr std::string_view kConversions = R"CK(
namespace ck_jit {
template <class T> CK_JIT_FN T arith(T v) { return v; }
CK_JIT_FN float arith(cudakit::ops::Half v) { return v.to_float(); }
CK_JIT_FN float arith(cudakit::ops::BFloat16 v) { return v.to_float(); }
// An input in its own dtype -> the common dtype (torch casts each input to it first).
template <class M, class S> CK_JIT_FN M cast(S v) {
  if constexpr (std::is_same_v<M, S>) return v;
  else return cudakit::ops::convert<M>(arith(v));
}
// The common dtype -> the type the user's function computes in.
template <class M> CK_JIT_FN auto to_compute(M v) { return arith(v); }
// Whatever the user's function produced -> the common dtype.
template <class M, class V> CK_JIT_FN M store(V v) { return cudakit::ops::convert<M>(arith(v)); }
template <class E> CK_JIT_FN E param(const unsigned char* slot) { return *reinterpret_cast<const E*>(slot); }
#if defined(__CUDACC_RTC__)
CK_JIT_FN unsigned umulhi(unsigned a, unsigned b) { return __umulhi(a, b); }
#else
inline unsigned umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
#endif
}  // namespace ck_jit
)CK";

const char* storage_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::uint8: return "std::uint8_t";
    case DType::int8: return "std::int8_t";
    case DType::int16: return "std::int16_t";
    case DType::int32: return "std::int32_t";
    case DType::int64: return "std::int64_t";
    case DType::float16: return "cudakit::ops::Half";
    case DType::bfloat16: return "cudakit::ops::BFloat16";
    case DType::float32: return "float";
    case DType::float64: return "double";
    case DType::complex64: return "cudakit::ops::Complex64";
    case DType::complex128: return "cudakit::ops::Complex128";
  }
  return "void";
}

// The type T of the user's template: torch's opmath type of the common dtype.
const char* compute_name(DType t) {
  switch (t) {
    case DType::float16:
    case DType::bfloat16: return "float";
    case DType::complex64: return "ck_jit::complex<float>";
    case DType::complex128: return "ck_jit::complex<double>";
    default: return storage_name(t);
  }
}

const char* param_name(Scalar::Kind k) {
  switch (k) {
    case Scalar::Kind::boolean: return "bool";
    case Scalar::Kind::integer: return "long long";
    case Scalar::Kind::floating: return "double";
    case Scalar::Kind::complex: return "ck_jit::complex<double>";
  }
  return "void";
}

bool needs_complex(const KernelSpec& s) {
  if (is_complex(s.common)) return true;
  for (int i = 0; i < s.nin; ++i)
    if (is_complex(s.inputs[i])) return true;
  for (int i = 0; i < s.nparams; ++i)
    if (s.params[i] == Scalar::Kind::complex) return true;
  return false;
}

// numeric.hpp minus its #pragma once and #include lines (each compiler gets its own
// headers from the prologue).
std::string numeric_text() {
  std::istringstream in{std::string(kNumericSource)};
  std::string out, line;
  while (std::getline(in, line)) {
    std::string_view v = line;
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    if (v.starts_with("#pragma once") || v.starts_with("#include")) line.clear();
    out += line;
    out += '\n';
  }
  return out;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// The generated part: parameter block, element function, kernel / host entry.
void emit_generated(std::ostringstream& o, const ParsedCode& parsed, const KernelSpec& s) {
  const int nt = s.operands(), nout = s.nout, nin = s.nin;
  const ParamLayout lay = layout_of(s);
  const char* M = storage_name(s.common);
  const char* I = s.index64 ? "long long" : "unsigned int";
  const char* O = s.index64 ? "long long" : "int";
  const std::string sym = kernel_symbol(parsed);

  o << "namespace ck_jit {\n";
  o << "typedef " << M << " M;\ntypedef " << compute_name(s.common) << " C;\n";
  o << "typedef " << I << " I;\ntypedef " << O << " O;\n";
  o << "constexpr int kOut = " << nout << ", kOperands = " << nt << ";\n";
  o << "struct dim { long long size; unsigned m1, shift; };\n";
  o << "struct params {\n  long long n;\n  long long ndim;\n  char* data[" << nt << "];\n";
  if (!s.contiguous) o << "  dim dims[" << kMaxDims << "];\n  long long strides[" << kMaxDims << "][" << nt << "];\n";
  o << "  alignas(16) unsigned char param[" << (s.nparams > 0 ? s.nparams : 1) << "][16];\n};\n";
  o << "static_assert(sizeof(params) == " << lay.size() << ", \"parameter block size\");\n";
  // The slots end the block and fill its 16-byte alignment: their offset is what precedes them.
  o << "static_assert(sizeof(params) - sizeof(params::param) == " << lay.params_offset()
    << ", \"parameter block layout\");\n";

  // The element: storage values in, common-dtype values out.
  o << "struct outs { M o[kOut]; };\n";
  o << "CK_JIT_FN outs apply(const params& p";
  for (int k = 0; k < nin; ++k) o << ", " << storage_name(s.inputs[k]) << " x" << k;
  o << ") {\n";
  for (int k = 0; k < nin; ++k) o << "  C a" << k << " = to_compute(cast<M>(x" << k << "));\n";
  std::ostringstream args;
  for (int k = 0; k < nin; ++k) args << (k ? ", " : "") << 'a' << k;
  for (int j = 0; j < s.nparams; ++j)
    args << ", param<" << param_name(s.params[j]) << ">(p.param[" << j << "])";
  o << "  outs r;\n";
  if (s.return_by_ref) {
    for (int k = 0; k < nout; ++k) o << "  C t" << k << "{};\n";
    o << "  ::" << parsed.name << "<C>(" << args.str();
    for (int k = 0; k < nout; ++k) o << ", t" << k;
    o << ");\n";
    for (int k = 0; k < nout; ++k) o << "  r.o[" << k << "] = store<M>(t" << k << ");\n";
  } else {
    o << "  r.o[0] = store<M>(::" << parsed.name << "<C>(" << args.str() << "));\n";
  }
  o << "  return r;\n}\n";

  o << "template <class T> CK_JIT_FN T load(const char* base, O off) {\n"
       "  return reinterpret_cast<const T*>(base)[off];\n}\n";
  o << "CK_JIT_FN void element(const params& p, I i) {\n";
  if (s.contiguous) {
    o << "  const O off = static_cast<O>(i);\n";
    o << "  outs r = apply(p";
    for (int k = 0; k < nin; ++k)
      o << ", load<" << storage_name(s.inputs[k]) << ">(p.data[" << nout + k << "], off)";
    o << ");\n";
    for (int k = 0; k < nout; ++k) o << "  reinterpret_cast<M*>(p.data[" << k << "])[off] = r.o[" << k << "];\n";
  } else {
    // Linear index -> per-operand offsets, innermost dim first. 32-bit indices divide by
    // multiply-high with host-computed magic numbers (valid below 2^31).
    o << "  O off[kOperands] = {};\n  I rest = i;\n";
    o << "  CK_JIT_UNROLL\n  for (int d = 0; d < " << kMaxDims << "; ++d) {\n";
    o << "    if (d == p.ndim) break;\n";
    if (s.index64) {
      o << "    const I q = rest / p.dims[d].size;\n";
    } else {
      o << "    const I q = (umulhi(rest, p.dims[d].m1) + rest) >> p.dims[d].shift;\n";
    }
    o << "    const I idx = rest - q * static_cast<I>(p.dims[d].size);\n    rest = q;\n";
    o << "    CK_JIT_UNROLL\n    for (int k = 0; k < kOperands; ++k)\n"
         "      off[k] += static_cast<O>(idx) * static_cast<O>(p.strides[d][k]);\n  }\n";
    o << "  outs r = apply(p";
    for (int k = 0; k < nin; ++k)
      o << ", load<" << storage_name(s.inputs[k]) << ">(p.data[" << nout + k << "], off[" << nout + k << "])";
    o << ");\n";
    for (int k = 0; k < nout; ++k)
      o << "  reinterpret_cast<M*>(p.data[" << k << "])[off[" << k << "]] = r.o[" << k << "];\n";
  }
  o << "}\n}  // namespace ck_jit\n";

  // Device kernel.
  o << "#if defined(__CUDACC_RTC__)\n";
  // __grid_constant__ (sm_70+, CUDA 11.7+): the kernel reads its parameter block in place,
  // where a reference to a plain by-value parameter makes a local-memory copy.
  o << "#if __CUDA_ARCH__ >= 700 && (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))\n"
       "#define CK_JIT_GRID_CONSTANT __grid_constant__\n#else\n#define CK_JIT_GRID_CONSTANT\n#endif\n";
  o << "namespace ck_jit {\n";
  o << "constexpr int kBlock = " << kBlock << ", kVec = " << int(s.vec) << ", kUnroll = "
    << int(s.unroll) << ";\n";
  o << "template <class T, int V> struct alignas(sizeof(T) * V) vec { T v[V]; };\n}\n";
  o << "extern \"C\" __global__ void __launch_bounds__(" << kBlock << ") " << sym
    << "(const CK_JIT_GRID_CONSTANT ck_jit::params p) {\n";
  o << "  using namespace ck_jit;\n  const I n = static_cast<I>(p.n);\n";
  if (s.contiguous) {
    // Full tiles: kUnroll vectors of kVec elements per thread and operand, coalesced (thread t
    // takes vectors t, t + kBlock, ...). The last, partial tile goes element by element.
    o << "  const I tile = static_cast<I>(kBlock * kVec * kUnroll);\n";
    o << "  const I start = static_cast<I>(blockIdx.x) * tile;\n";
    o << "  if (start + tile <= n) {\n";
    o << "    const I v0 = start / kVec + static_cast<I>(threadIdx.x);\n";
    for (int k = 0; k < nin; ++k)
      o << "    vec<" << storage_name(s.inputs[k]) << ", kVec> in" << k << "[kUnroll];\n";
    o << "    CK_JIT_UNROLL\n    for (int u = 0; u < kUnroll; ++u) {\n";
    for (int k = 0; k < nin; ++k)
      o << "      in" << k << "[u] = reinterpret_cast<const vec<" << storage_name(s.inputs[k])
        << ", kVec>*>(p.data[" << nout + k << "])[v0 + u * kBlock];\n";
    o << "    }\n";
    for (int k = 0; k < nout; ++k) o << "    vec<M, kVec> out" << k << "[kUnroll];\n";
    o << "    CK_JIT_UNROLL\n    for (int u = 0; u < kUnroll; ++u) {\n";
    o << "      CK_JIT_UNROLL\n      for (int j = 0; j < kVec; ++j) {\n";
    o << "        outs r = apply(p";
    for (int k = 0; k < nin; ++k) o << ", in" << k << "[u].v[j]";
    o << ");\n";
    for (int k = 0; k < nout; ++k) o << "        out" << k << "[u].v[j] = r.o[" << k << "];\n";
    o << "      }\n    }\n";
    o << "    CK_JIT_UNROLL\n    for (int u = 0; u < kUnroll; ++u) {\n";
    for (int k = 0; k < nout; ++k)
      o << "      reinterpret_cast<vec<M, kVec>*>(p.data[" << k << "])[v0 + u * kBlock] = out" << k << "[u];\n";
    o << "    }\n  } else {\n";
    o << "    for (I i = start + static_cast<I>(threadIdx.x); i < n; i += kBlock) element(p, i);\n  }\n";
  } else {
    o << "  const I base = static_cast<I>(blockIdx.x) * static_cast<I>(kBlock * kUnroll) + "
         "static_cast<I>(threadIdx.x);\n";
    o << "  CK_JIT_UNROLL\n  for (int u = 0; u < kUnroll; ++u) {\n";
    o << "    const I i = base + static_cast<I>(u * kBlock);\n    if (i < n) element(p, i);\n  }\n";
  }
  o << "}\n";
  // Host entry (emulated backend): the same element function over every index.
  o << "#else\n";
  o << "extern \"C\" __attribute__((visibility(\"default\"))) void " << sym << "(const void* pv) {\n";
  o << "  const ck_jit::params& p = *static_cast<const ck_jit::params*>(pv);\n";
  o << "  const ck_jit::I n = static_cast<ck_jit::I>(p.n);\n";
  o << "  for (ck_jit::I i = 0; i < n; ++i) ck_jit::element(p, i);\n}\n";
  o << "#endif\n";
}

}  // namespace

std::string kernel_symbol(const ParsedCode& parsed) { return "ck_jit_" + parsed.name; }

std::string generate_source(const std::string& code, const ParsedCode& parsed,
                            const KernelSpec& spec) {
  static const std::string numeric = numeric_text();
  std::ostringstream o;
  o << kPrologue << numeric;
  if (needs_complex(spec)) o << kComplex;
  o << kConversions;
  o << "#line 1 \"" << kUserFile << "\"\n" << code << "\n";
  const std::string head = o.str();
  // Diagnostics in the generated part name lines of the whole source.
  o << "#line " << count_lines(head) + 2 << " \"" << kGeneratedFile << "\"\n";
  emit_generated(o, parsed, spec);
  return o.str();
}

}  // namespace cudakit::jit
