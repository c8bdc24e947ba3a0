// dtype tables and torch's promotion rules.
#include <array>
#include <string>

#include "cudakit/error.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit {
namespace {
constexpr std::array<std::size_t, kNumDTypes> kSizes = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16};
constexpr std::array<const char*, kNumDTypes> kNames = {
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
int idx(DType t) { return static_cast<int>(t); }
}  // namespace

std::size_t element_size(DType t) noexcept { return kSizes[idx(t)]; }
const char* dtype_name(DType t) noexcept { return kNames[idx(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (std::string_view prefix : {"torch.", "cudakit.", "numpy.", "np."}) {
    if (name.substr(0, prefix.size()) == prefix) { name.remove_prefix(prefix.size()); break; }
  }
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kNames[i]) return static_cast<DType>(i);
  struct Alias { std::string_view n; DType t; };
  static constexpr Alias aliases[] = {
      {"bool_", DType::bool_}, {"half", DType::float16}, {"float", DType::float32},
      {"double", DType::float64}, {"long", DType::int64}, {"int", DType::int32},
      {"short", DType::int16}, {"cfloat", DType::complex64}, {"cdouble", DType::complex128},
      {"byte", DType::uint8}, {"char", DType::int8}};
  for (const auto& a : aliases)
    if (name == a.n) return a.t;
  return std::nullopt;
}

bool is_floating_point(DType t) noexcept {
  return t == DType::float16 || t == DType::bfloat16 || t == DType::float32 || t == DType::float64;
}
bool is_complex(DType t) noexcept { return t == DType::complex64 || t == DType::complex128; }
bool is_integral(DType t, bool include_bool) noexcept {
  return (t >= DType::uint8 && t <= DType::int64) || (include_bool && t == DType::bool_);
}

DType promote_types(DType a, DType b) noexcept {
  if (a == b) return a;
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  bool ai = is_integral(a, false), bi = is_integral(b, false);
  if (ai && bi) {
    if (a == DType::uint8 || b == DType::uint8) {
      DType other = a == DType::uint8 ? b : a;
      return other == DType::int8 ? DType::int16 : other;  // signed types are >= int8
    }
    return element_size(a) >= element_size(b) ? a : b;
  }
  if (ai) return b;  // int with float/complex -> the float/complex
  if (bi) return a;
  bool ac = is_complex(a), bc = is_complex(b);
  if (!ac && !bc) {
    if (element_size(a) == 2 && element_size(b) == 2) return DType::float32;  // f16 + bf16
    return element_size(a) >= element_size(b) ? a : b;
  }
  if (ac && bc) return a == DType::complex128 || b == DType::complex128 ? DType::complex128
                                                                       : DType::complex64;
  DType c = ac ? a : b, f = ac ? b : a;
  return (c == DType::complex128 || f == DType::float64) ? DType::complex128 : DType::complex64;
}

DType Scalar::default_dtype() const noexcept {
  switch (kind) {
    case Kind::boolean: return DType::bool_;
    case Kind::integer: return DType::int64;
    case Kind::floating: return DType::float32;
    default: return DType::complex64;
  }
}

Device Device::cuda(int index) { return Device{Type::cuda, resolve_device(index)}; }

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(kCurrentDevice);
  if (s.substr(0, 5) == "cuda:" && s.size() > 5 && s.size() <= 5 + 9) {  // <= 9 digits: no overflow
    int v = 0;
    bool digits = true;
    for (char ch : s.substr(5)) {
      if (ch < '0' || ch > '9') digits = false;
      else v = v * 10 + (ch - '0');
    }
    if (digits) return cuda(v);
  }
  throw ValueError("Invalid device string: '" + std::string(s) +
                   "' (expected 'cpu', 'cuda' or 'cuda:N' with N a device index)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace cudakit
