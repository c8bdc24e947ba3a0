#include "tensor/size_math.hpp"

#include <cstdio>
#include <string>
#include <tuple>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail {
namespace {

// Decimal text of an unsigned 128-bit value (the exact size a message reports).
std::string u128_str(unsigned __int128 v) {
  if (v == 0) return "0";
  std::string s;
  while (v) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return s;
}

// The exact product of `sizes` for a message, or a bound when even 128 bits overflow.
std::string product_str(const Shape& sizes) {
  unsigned __int128 p = 1;
  for (auto s : sizes) {
    if (s == 0) return "0";
    if (__builtin_mul_overflow(p, static_cast<unsigned __int128>(s), &p)) return "more than 2**128";
  }
  return u128_str(p);
}

std::string human_bytes(unsigned __int128 b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  long double v = static_cast<long double>(b);
  int u = 0;
  while (v >= 1024 && u < 8) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.2Lf %s" : "%.0Lf %s", v, units[u]);
  return buf;
}

[[noreturn]] void throw_too_large(unsigned __int128 bytes, const Shape& sizes, DType dtype,
                                 const Device& device, const char* what) {
  const std::size_t requested = bytes > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(bytes);
  // The device's real free / total memory, as a driver-refused allocation reports it: an
  // error that says "0 bytes free" sends the reader hunting for a leak that is not there.
  std::size_t free_bytes = 0, total_bytes = 0;
  if (device.is_cuda()) {
    try {
      std::tie(free_bytes, total_bytes) = mem_get_info(device.index);
    } catch (...) {  // the size is the error; an unanswerable query must not replace it
    }
  }
  throw OutOfMemoryError(std::string(what) + ": Tried to allocate " + human_bytes(bytes) + " (" +
                             u128_str(bytes) + " bytes) for shape " + shape_str(sizes) + " of " +
                             dtype_name(dtype) + " on " + device.str() +
                             ": larger than any allocation can be (at most 2**63-1 bytes)",
                         device.is_cuda() ? device.index : -1, requested, free_bytes,
                         total_bytes);
}

}  // namespace

std::int64_t checked_numel(const Shape& sizes, const char* what) {
  std::int64_t n = 1;
  bool overflow = false;
  for (auto s : sizes) {
    if (s < 0)
      throw ValueError(std::string(what) + ": trying to create tensor with negative dimension " +
                       std::to_string(s) + ": " + shape_str(sizes));
    if (!overflow && __builtin_mul_overflow(n, s, &n)) overflow = true;
  }
  // A zero anywhere makes the product 0 even if a prefix overflowed.
  for (auto s : sizes)
    if (s == 0) return 0;
  if (overflow)
    throw ValueError(std::string(what) + ": shape " + shape_str(sizes) + " has " + product_str(sizes) +
                     " elements; a tensor holds at most 9223372036854775807 (2**63-1)");
  return n;
}

StorageSpan checked_span(const Shape& sizes, const Shape& strides, DType dtype,
                         const Device& device, const char* what, bool allocation) {
  if (sizes.size() != strides.size())
    throw ValueError(std::string(what) + ": sizes " + shape_str(sizes) + " and strides " +
                     shape_str(strides) + " must have the same length");
  StorageSpan sp;
  sp.numel = checked_numel(sizes, what);
  if (sp.numel == 0) return sp;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::int64_t reach = 0;
    bool bad = __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach);
    if (!bad) bad = strides[i] >= 0 ? __builtin_add_overflow(sp.hi, reach, &sp.hi)
                                    : __builtin_add_overflow(sp.lo, reach, &sp.lo);
    if (bad)
      throw ValueError(std::string(what) + ": sizes " + shape_str(sizes) + " with strides " +
                       shape_str(strides) + " reach element offsets beyond 64 bits");
  }
  const unsigned __int128 elems = static_cast<unsigned __int128>(
                                      static_cast<__int128>(sp.hi) - static_cast<__int128>(sp.lo)) + 1;
  const unsigned __int128 bytes = elems * element_size(dtype);  // < 2**68: no overflow
  if (bytes > kMaxAllocBytes && !allocation)
    throw ValueError(std::string(what) + ": sizes " + shape_str(sizes) + " with strides " + shape_str(strides) +
                     " of " + dtype_name(dtype) + " span " + u128_str(bytes) +
                     " bytes, more than any memory can hold (at most 2**63-1 bytes)");
  if (bytes > kMaxAllocBytes) throw_too_large(bytes, sizes, dtype, device, what);
  sp.nbytes = static_cast<std::size_t>(bytes);
  return sp;
}

}  // namespace cudakit::detail
