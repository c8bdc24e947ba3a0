// Element types and conversions shared by host code (CPU executor, emulated backend) and the
// CUDA kernels (src/kernels/*.cu): dtype codes, IEEE half / bfloat16 with software rounding,
// complex, and conversion between any two of them. Header-only, free of the standard
// library's non-constexpr parts, and marked __host__ __device__ so both compilers see the
// same arithmetic — which is what makes results agree bit for bit between backends.
//
// Layering: src/kernels/ holds host/device-portable code only and includes nothing from the
// rest of src/, so ops, random and the backends can all build on it without cycles.
//
// dtype codes are cudakit::DType's numeric values (tensor.hpp).
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define CK_HD __host__ __device__ __forceinline__
#else
#define CK_HD inline
#endif

namespace cudakit::ops {

enum DTypeCode : int {
  kBool = 0, kUInt8, kInt8, kInt16, kInt32, kInt64,
  kFloat16, kBFloat16, kFloat32, kFloat64, kComplex64, kComplex128
};

CK_HD std::uint32_t f32_bits(float f) {
  union { float f; std::uint32_t u; } v{f};
  return v.u;
}
CK_HD float bits_f32(std::uint32_t u) {
  union { std::uint32_t u; float f; } v{u};
  return v.f;
}

// IEEE binary16 stored as bits; converted with round-to-nearest-even in software so the
// host and the device agree bit for bit.
struct alignas(2) Half {
  std::uint16_t x;
  CK_HD static Half from_float(float f) {
    std::uint32_t u = f32_bits(f);
    std::uint32_t sign = (u >> 16) & 0x8000u;
    std::uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {  // inf / nan
      return Half{static_cast<std::uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u))};
    }
    if (a >= 0x477ff000u) return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow
    if (a < 0x38800000u) {  // subnormal half (or zero): value = a_float * 2^24 rounded
      // Align the implicit-bit mantissa to half's subnormal ulp (2^-24).
      int e = static_cast<int>(a >> 23);
      if (e < 102) return Half{static_cast<std::uint16_t>(sign)};  // < 2^-25: rounds to 0
      std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
      int shift = 126 - e;  // 14..24
      std::uint32_t q = m >> shift;
      std::uint32_t rem = m & ((1u << shift) - 1u);
      std::uint32_t half_ulp = 1u << (shift - 1);
      if (rem > half_ulp || (rem == half_ulp && (q & 1u))) ++q;
      return Half{static_cast<std::uint16_t>(sign | q)};
    }
    std::uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
    std::uint32_t q = r >> 13;
    std::uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    return Half{static_cast<std::uint16_t>(sign | q)};
  }
  CK_HD float to_float() const {
    std::uint32_t sign = static_cast<std::uint32_t>(x & 0x8000u) << 16;
    std::uint32_t e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
    if (e == 0) {
      // subnormal: m * 2^-24, exact in float
      float v = static_cast<float>(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  }
};

struct alignas(2) BFloat16 {
  std::uint16_t x;
  CK_HD static BFloat16 from_float(float f) {
    std::uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return BFloat16{static_cast<std::uint16_t>(u >> 16)};
  }
  CK_HD float to_float() const { return bits_f32(static_cast<std::uint32_t>(x) << 16); }
};

template <class R>
struct alignas(2 * sizeof(R)) Complex {
  R re, im;
};
using Complex64 = Complex<float>;
using Complex128 = Complex<double>;

template <class T> struct is_complex_t : std::false_type {};
template <class R> struct is_complex_t<Complex<R>> : std::true_type {};
template <class T> struct is_reduced_t : std::false_type {};  // half / bfloat16
template <> struct is_reduced_t<Half> : std::true_type {};
template <> struct is_reduced_t<BFloat16> : std::true_type {};

// Arithmetic type an element is computed in.
template <class T> struct compute_t { using type = T; };
template <> struct compute_t<Half> { using type = float; };
template <> struct compute_t<BFloat16> { using type = float; };
template <class T> using compute_type = typename compute_t<T>::type;

template <class T>
CK_HD compute_type<T> load_c(T v) {
  if constexpr (is_reduced_t<T>::value) return v.to_float();
  else return v;
}
template <class T>
CK_HD T store_c(compute_type<T> v) {
  if constexpr (is_reduced_t<T>::value) return T::from_float(v);
  else return v;
}

// Converts a compute-domain value `v` (arithmetic or Complex) to storage type D.
template <class D, class S>
CK_HD D convert(S v) {
  if constexpr (is_complex_t<S>::value) {
    if constexpr (is_complex_t<D>::value) {
      using R = decltype(D{}.re);
      return D{static_cast<R>(v.re), static_cast<R>(v.im)};
    } else if constexpr (std::is_same_v<D, bool>) {
      return v.re != 0 || v.im != 0;
    } else {
      return convert<D>(v.re);
    }
  } else {
    if constexpr (is_complex_t<D>::value) {
      using R = decltype(D{}.re);
      return D{static_cast<R>(v), R(0)};
    } else if constexpr (is_reduced_t<D>::value) {
      return D::from_float(static_cast<float>(v));
    } else if constexpr (std::is_same_v<D, bool>) {
      return v != 0;
    } else {
      return static_cast<D>(v);
    }
  }
}

// Reads an element of runtime dtype `code` at `p` and converts it to D.
template <class D>
CK_HD D load_as(const void* p, int code) {
  switch (code) {
    case kBool: return convert<D>(*static_cast<const bool*>(p));
    case kUInt8: return convert<D>(*static_cast<const std::uint8_t*>(p));
    case kInt8: return convert<D>(*static_cast<const std::int8_t*>(p));
    case kInt16: return convert<D>(*static_cast<const std::int16_t*>(p));
    case kInt32: return convert<D>(*static_cast<const std::int32_t*>(p));
    case kInt64: return convert<D>(*static_cast<const std::int64_t*>(p));
    case kFloat16: return convert<D>(static_cast<const Half*>(p)->to_float());
    case kBFloat16: return convert<D>(static_cast<const BFloat16*>(p)->to_float());
    case kFloat32: return convert<D>(*static_cast<const float*>(p));
    case kFloat64: return convert<D>(*static_cast<const double*>(p));
    case kComplex64: return convert<D>(*static_cast<const Complex64*>(p));
    default: return convert<D>(*static_cast<const Complex128*>(p));
  }
}

}  // namespace cudakit::ops
