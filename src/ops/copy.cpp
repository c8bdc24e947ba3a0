// Tensor::copy_ (any device <-> any device, any dtype, strided, broadcast), fill_, item().
#include <cstring>

#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "devices/sync_debug.hpp"
#include "memory/host_allocator.hpp"
#include "ops/executor.hpp"

namespace cudakit {
using namespace ops;

namespace {
// Same-device strided/casting copy through the executors.
void cast_copy(const Tensor& dst, const Tensor& src) {
  CastArgs args{};
  args.out = dst.data_ptr();
  args.a = src.data_ptr();
  args.n = dst.numel();
  args.src_code = code(src.dtype());
  args.contiguous = dst.is_contiguous() && src.is_contiguous() && src.sizes() == dst.sizes();
  args.calc = make_calc<2>(dst.sizes(), {&dst.strides(), &src.strides()});
  if (args.n == 0) return;
  Device d = dst.device();
  sanitize("copy_", d, {{&src, "src"}}, {{&dst, "self"}});
  int dc = code(dst.dtype());
  if (exec_for(d) == Exec::cuda) cuda_cast(d.index, stream_for(d), args, dc);
  else run_cpu(d, {dst.storage(), src.storage()}, [args, dc] { cpu_cast(args, dc); }, "ck_cast");
}

// Both dense with identical layout: one memcpy moves everything.
bool same_dense_layout(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         ((a.is_contiguous() && b.is_contiguous()) ||
          (a.strides() == b.strides() && a.is_non_overlapping_and_dense()));
}

// Start of the memory range a dense tensor covers (lowest address).
const void* dense_begin(const Tensor& t) {
  std::int64_t lo = 0;
  for (std::size_t i = 0; i < t.sizes().size(); ++i)
    if (t.strides()[i] < 0) lo += (t.sizes()[i] - 1) * t.strides()[i];
  return static_cast<const char*>(t.data_ptr()) + lo * static_cast<std::int64_t>(t.element_size());
}

// Keeps storages alive until the work enqueued so far on `s` has run.
void keep_alive(detail::StreamHandle s, std::vector<std::shared_ptr<Storage>> keep) {
  detail::stream_ops().launch_host_task(s, [keep = std::move(keep)] {});
}

// Makes both ends of an asynchronous host<->device copy on `s` (device `dev`) safe to free
// before the copy has run, at the cost torch pays (an event), not a host callback per copy
// (a callback stalls the stream until the host thread ran it: measured on 1 MiB copies).
//  * cudakit's pinned blocks: an event on `s`; the host cache reuses the block only after it
//    (torch's CachingHostAllocator_recordEvent).
//  * pageable memory (CUDA): nothing; the driver has consumed or filled it when the call
//    returns.
//  * cudakit's device memory: record_stream when `s` is not its allocation stream (reuse on
//    the allocation stream is ordered after the copy anyway).
//  * anything else (foreign pinned memory; every host end on the emulated backend, whose
//    stream worker reads host memory later): kept alive by a host callback.
void protect_async_ends(detail::StreamHandle s, int dev, const std::shared_ptr<Storage>& a,
                        const std::shared_ptr<Storage>& b) {
  const bool cuda = exec_for(Device::cuda(dev)) == Exec::cuda;
  std::vector<std::shared_ptr<Storage>> keep;
  for (const auto& st : {a, b}) {
    if (!st || !st->data()) continue;
    if (st->device().is_cuda()) {
      if (st->is_external()) continue;  // lifetime managed by the framework that owns it
      if (auto as = st->stream(); as && as->handle() != s) {
        cudakit::record_stream(st->data(), StreamRef::from_handle(s, dev));
      }
      continue;
    }
    if (cuda && !st->pinned()) continue;
    if (cuda && !st->is_external() && memory::host_allocator().record_event(st->data(), s, dev)) continue;
    keep.push_back(st);
  }
  if (!keep.empty()) keep_alive(s, std::move(keep));
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src0, bool non_blocking) {
  if (!defined() || !src0.defined()) throw ValueError("copy_: undefined tensor");
  Tensor src = src0.sizes() == sizes_ ? src0 : src0.expand(sizes_);
  if (numel() == 0) return *this;
  Device dd = device(), sd = src.device();
  if (dd == sd) {
    if (same_dense_layout(*this, src) && data_ptr() == src.data_ptr()) return *this;
    if (same_dense_layout(*this, src) && dd.is_cuda()) {
      DeviceGuard guard(dd.index);  // a null (legacy) stream handle names the current device's
      sanitize("copy_", dd, {{&src, "src"}}, {{this, "self"}});
      detail::memory_ops().memcpy_async(const_cast<void*>(dense_begin(*this)), dense_begin(src), nbytes(), stream_for(dd));
      return *this;
    }
    cast_copy(*this, src);
    return *this;
  }
  // Different devices (host <-> device, or device <-> device).
  // A blocking copy from or to host memory waits for the stream: the sync debug mode reports
  // it before anything is enqueued (torch's memcpy_and_sync does the same). So does a
  // non-blocking copy into a strided host tensor, which has to wait before it can scatter.
  if ((dd.is_cpu() || sd.is_cpu()) && (!non_blocking || (dd.is_cpu() && !same_dense_layout(*this, src) && !is_contiguous())))
    detail::on_synchronizing_call("a blocking copy between host and device memory: copy_/to()/cpu()/item()/numpy() "
                                  "with non_blocking=False");
  // The copy runs on the current stream of the device side (dst's when both are devices).
  Device cd = dd.is_cuda() ? dd : sd;
  // Every call below that takes `s` resolves a null (legacy default) handle against the
  // current device: make it cd.
  DeviceGuard guard(cd.index);
  detail::StreamHandle s = stream_for(cd);
  bool dense = same_dense_layout(*this, src);
  // Non-dense sources are first converted on their own side into a contiguous buffer of
  // our dtype; the bytes then move in one memcpy and get scattered into our strides.
  Tensor staged;
  if (!dense) staged = src.dtype() == dtype_ && src.is_contiguous() ? src : src.to(dtype_).contiguous();
  if (dd.is_cuda() && sd.is_cuda()) {
    // Order after the source device's pending work, and make it wait for ours afterwards.
    current_stream(cd.index).wait(current_stream(sd.index));
  }
  // One access for the whole transfer on `s` (staging and landing buffers are ops of their own).
  sanitize("copy_", cd, {{&src, "src"}}, {{this, "self"}});
  if (dense) {
    detail::memory_ops().memcpy_async(const_cast<void*>(dense_begin(*this)), dense_begin(src), nbytes(), s);
  } else {
    if (is_contiguous()) {
      detail::memory_ops().memcpy_async(data_ptr(), staged.data_ptr(), nbytes(), s);
    } else {
      Tensor landing = empty(sizes_, TensorOptions{dtype_, dd, false});
      detail::memory_ops().memcpy_async(landing.data_ptr(), staged.data_ptr(), nbytes(), s);
      if (dd.is_cpu()) {
        detail::stream_ops().stream_synchronize(s);  // host scatter needs the bytes
        if (const auto* o = instrument::stream_observer()) [[unlikely]] o->host_waited_stream(s, cd.index);  // sanitizer
      }
      cast_copy(*this, landing);
      if (dd.is_cuda()) keep_alive(s, {landing.storage()});
    }
    if (non_blocking) keep_alive(s, {staged.storage()});
  }
  if (dd.is_cuda() && sd.is_cuda()) current_stream(sd.index).wait(current_stream(cd.index));
  // Asynchronous copies from/to host memory: keep both ends alive until the copy ran.
  if (non_blocking && (dd.is_cpu() || sd.is_cpu())) protect_async_ends(s, cd.index, storage_, src.storage());
  if (!non_blocking && (dd.is_cpu() || sd.is_cpu())) {
    detail::stream_ops().stream_synchronize(s);
    if (const auto* o = instrument::stream_observer()) [[unlikely]] o->host_waited_stream(s, cd.index);  // sanitizer
  }
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  if (!defined()) throw ValueError("fill_: undefined tensor");
  FillArgs args{};
  args.out = data_ptr();
  args.n = numel();
  args.contiguous = is_contiguous();
  scalar_to_bytes(value, dtype_, args.value, "fill_");
  args.calc = make_calc<1>(sizes_, {&strides_});
  if (args.n == 0) return *this;
  Device d = device();
  sanitize("fill_", d, {}, {{this, "self"}});
  int es = static_cast<int>(element_size());
  if (exec_for(d) == Exec::cuda) cuda_fill(d.index, stream_for(d), args, es);
  else run_cpu(d, {storage_}, [args, es] { cpu_fill(args, es); }, "ck_fill");
  return *this;
}

Scalar Tensor::item() const {
  if (numel() != 1)
    throw ValueError("a Tensor with " + std::to_string(numel()) + " elements cannot be converted to Scalar");
  // Any shape holding one element (e.g. [1], [1, 1]): read it through a 0-d view.
  Tensor h = empty({}, TensorOptions{dtype_, Device::cpu()});
  h.copy_(as_strided({}, {}, offset_));  // synchronous
  const void* p = h.data_ptr();
  switch (dtype_) {
    case DType::bool_: return Scalar(*static_cast<const bool*>(p));
    case DType::complex64:
    case DType::complex128: {
      auto c = load_as<Complex128>(p, code(dtype_));
      return Scalar(std::complex<double>(c.re, c.im));
    }
    default:
      if (is_integral(dtype_, false)) return Scalar(static_cast<long long>(load_as<std::int64_t>(p, code(dtype_))));
      return Scalar(load_as<double>(p, code(dtype_)));
  }
}

}  // namespace cudakit
