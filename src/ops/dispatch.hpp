// dtype code -> C++ storage type, for both executors' host-side code.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise.hpp"

namespace cudakit::ops {

template <class T> struct Tag { using type = T; };

template <class F>
void dispatch_dtype(int code, F&& f) {
  switch (code) {
    case kBool: f(Tag<bool>{}); break;
    case kUInt8: f(Tag<std::uint8_t>{}); break;
    case kInt8: f(Tag<std::int8_t>{}); break;
    case kInt16: f(Tag<std::int16_t>{}); break;
    case kInt32: f(Tag<std::int32_t>{}); break;
    case kInt64: f(Tag<std::int64_t>{}); break;
    case kFloat16: f(Tag<Half>{}); break;
    case kBFloat16: f(Tag<BFloat16>{}); break;
    case kFloat32: f(Tag<float>{}); break;
    case kFloat64: f(Tag<double>{}); break;
    case kComplex64: f(Tag<Complex64>{}); break;
    default: f(Tag<Complex128>{}); break;
  }
}

// Short kernel-name suffix of a dtype code (matches src/kernels/*.cu).
inline const char* dtype_suffix(int code) {
  static const char* s[] = {"b8", "u8", "i8", "i16", "i32", "i64",
                            "f16", "bf16", "f32", "f64", "c64", "c128"};
  return s[code];
}

}  // namespace cudakit::ops
