#include "ops/executor.hpp"

#include <cstring>
#include <string>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"

namespace cudakit::ops {

Exec exec_for(const Device& d) {
  if (d.is_cpu()) return Exec::host;
  // The backend is fixed for the process: cache the answer (hot path).
  static const bool kernels = detail::backend().capabilities().runs_kernels;
  return kernels ? Exec::cuda : Exec::emulated;
}

detail::StreamHandle stream_for(const Device& d) { return current_stream(d.index).handle(); }

void run_cpu(const Device& d, std::vector<std::shared_ptr<Storage>> keep, std::function<void()> fn,
             const char* kernel) {
  if (d.is_cpu()) {
    fn();
    return;
  }
  // The null handle of a legacy default stream names the current device's: make d current so
  // the task lands on d's stream (found by comm tests: a cuda:1 fill issued while cuda:0 was
  // current ran on cuda:0's stream, unordered with cuda:1's work).
  DeviceGuard guard(d.index);
  // The task keeps only what the caching allocator does not order by stream: host memory
  // (pageable or pinned: on CUDA a pageable copy is synchronous, and the pinned cache guards
  // its blocks with events) and memory someone else owns. cudakit's device blocks are
  // returned to the allocator when their last tensor goes, as on CUDA: the block is reused
  // only in stream order (or after record_stream's events), so memory_allocated() drops at
  // `del` (torch's semantics) and the emulated backend defers the host free of a released
  // segment until the streams have run what was queued before it (emulated/memory.cpp).
  std::erase_if(keep, [](const std::shared_ptr<Storage>& s) {
    return s && s->device().is_cuda() && !s->is_external();
  });
  if (keep.empty()) {
    detail::backend().launch_host_kernel(stream_for(d), kernel, std::move(fn));
    return;
  }
  detail::backend().launch_host_kernel(stream_for(d), kernel,
                                       [keep = std::move(keep), fn = std::move(fn)] { fn(); });
}

template <int N>
OffsetCalc<N> make_calc(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  // Innermost first, dropping size-1 dims, merging dims that are contiguous for everyone.
  std::vector<std::int64_t> sz;
  std::vector<std::array<std::int64_t, N>> st;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    std::array<std::int64_t, N> s{};
    for (int a = 0; a < N; ++a) s[a] = (*strides[a])[i];
    if (!sz.empty()) {
      bool merge = true;
      for (int a = 0; a < N; ++a) merge = merge && s[a] == st.back()[a] * sz.back();
      if (merge) {
        sz.back() *= sizes[i];
        continue;
      }
    }
    sz.push_back(sizes[i]);
    st.push_back(s);
  }
  if (sz.size() > 8)
    throw NotSupportedError("built-in ops support at most 8 non-contiguous dimensions (got " +
                            std::to_string(sz.size()) + "); call .contiguous() first");
  OffsetCalc<N> c{};
  c.ndim = static_cast<int>(sz.size());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = sz[d];
    for (int a = 0; a < N; ++a) c.strides[a][d] = st[d][a];
  }
  return c;
}
template OffsetCalc<1> make_calc<1>(const Shape&, const std::array<const Shape*, 1>&);
template OffsetCalc<2> make_calc<2>(const Shape&, const std::array<const Shape*, 2>&);
template OffsetCalc<3> make_calc<3>(const Shape&, const std::array<const Shape*, 3>&);
// The jiterator's up to 8 outputs + 8 inputs (unused slots repeat an operand).
template OffsetCalc<16> make_calc<16>(const Shape&, const std::array<const Shape*, 16>&);

template <class D>
static void put(const Scalar& v, unsigned char out[16]) {
  D d;
  switch (v.kind) {
    case Scalar::Kind::boolean:
    case Scalar::Kind::integer: d = convert<D>(v.i); break;
    case Scalar::Kind::floating: d = convert<D>(v.d); break;
    default: d = convert<D>(Complex128{v.c.real(), v.c.imag()}); break;
  }
  std::memcpy(out, &d, sizeof(D));
}

void scalar_to_bytes(const Scalar& v, DType t, unsigned char out[16]) {
  std::memset(out, 0, 16);
  switch (t) {
    case DType::bool_: put<bool>(v, out); break;
    case DType::uint8: put<std::uint8_t>(v, out); break;
    case DType::int8: put<std::int8_t>(v, out); break;
    case DType::int16: put<std::int16_t>(v, out); break;
    case DType::int32: put<std::int32_t>(v, out); break;
    case DType::int64: put<std::int64_t>(v, out); break;
    case DType::float16: put<Half>(v, out); break;
    case DType::bfloat16: put<BFloat16>(v, out); break;
    case DType::float32: put<float>(v, out); break;
    case DType::float64: put<double>(v, out); break;
    case DType::complex64: put<Complex64>(v, out); break;
    case DType::complex128: put<Complex128>(v, out); break;
  }
}

}  // namespace cudakit::ops
