#include "cudakit/dlpack.hpp"

#include <string>
#include <vector>

#include "cudakit/error.hpp"

namespace cudakit::dlpack {

DLDevice device_of(const Tensor& t) {
  Device d = t.device();
  if (d.is_cuda()) return DLDevice{kDLCUDA, d.index};
  return DLDevice{t.is_pinned() ? kDLCUDAHost : kDLCPU, 0};
}

DLDataType to_dl_dtype(DType t) {
  auto bits = static_cast<std::uint8_t>(element_size(t) * 8);
  switch (t) {
    case DType::bool_: return {kDLBool, 8, 1};
    case DType::uint8: return {kDLUInt, 8, 1};
    case DType::int8: case DType::int16: case DType::int32: case DType::int64: return {kDLInt, bits, 1};
    case DType::bfloat16: return {kDLBfloat, 16, 1};
    case DType::complex64: case DType::complex128: return {kDLComplex, bits, 1};
    default: return {kDLFloat, bits, 1};
  }
}

DType from_dl_dtype(DLDataType t) {
  if (t.lanes != 1) throw ValueError("DLPack: vector dtypes (lanes=" + std::to_string(t.lanes) + ") are not supported");
  switch (t.code) {
    case kDLBool: if (t.bits == 8) return DType::bool_; break;
    case kDLUInt: if (t.bits == 8) return DType::uint8; if (t.bits == 1) break; break;
    case kDLInt:
      if (t.bits == 8) return DType::int8;
      if (t.bits == 16) return DType::int16;
      if (t.bits == 32) return DType::int32;
      if (t.bits == 64) return DType::int64;
      break;
    case kDLFloat:
      if (t.bits == 16) return DType::float16;
      if (t.bits == 32) return DType::float32;
      if (t.bits == 64) return DType::float64;
      break;
    case kDLBfloat: if (t.bits == 16) return DType::bfloat16; break;
    case kDLComplex:
      if (t.bits == 64) return DType::complex64;
      if (t.bits == 128) return DType::complex128;
      break;
  }
  throw ValueError("DLPack: unsupported dtype (code=" + std::to_string(t.code) + ", bits=" +
                   std::to_string(t.bits) + ")");
}

namespace {
struct Ctx {
  Tensor t;
  std::vector<std::int64_t> shape, strides;
};

template <class M>
M* make(const Tensor& t) {
  auto* ctx = new Ctx{t, t.sizes(), t.strides()};
  auto* m = new M{};
  m->manager_ctx = ctx;
  m->deleter = [](M* self) {
    delete static_cast<Ctx*>(self->manager_ctx);
    delete self;
  };
  DLTensor& d = m->dl_tensor;
  d.data = t.data_ptr();
  d.device = device_of(t);
  d.ndim = static_cast<std::int32_t>(t.dim());
  d.dtype = to_dl_dtype(t.dtype());
  d.shape = ctx->shape.data();
  d.strides = ctx->strides.data();
  d.byte_offset = 0;
  return m;
}

template <class M>
Tensor import(M* m, std::function<void(std::function<void()>)> release) {
  if (!m) throw ValueError("from_dlpack: null DLManagedTensor");
  auto run_deleter = [m] { if (m->deleter) m->deleter(m); };
  std::function<void()> rel = release ? std::function<void()>([release, run_deleter] { release(run_deleter); })
                                      : std::function<void()>(run_deleter);
  try {
    const DLTensor& d = m->dl_tensor;
    DType dt = from_dl_dtype(d.dtype);
    Device dev;
    bool pinned = false;
    switch (d.device.device_type) {
      case kDLCPU: dev = Device::cpu(); break;
      case kDLCUDAHost: dev = Device::cpu(); pinned = true; break;
      case kDLCUDA:
      case kDLCUDAManaged: dev = Device::cuda(d.device.device_id); break;
      default:
        throw ValueError("from_dlpack: unsupported device type " + std::to_string(d.device.device_type) +
                         " (cudakit accepts kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged)");
    }
    if (d.ndim < 0) throw ValueError("from_dlpack: negative ndim " + std::to_string(d.ndim));
    if (d.ndim > 0 && !d.shape) throw ValueError("from_dlpack: ndim is " + std::to_string(d.ndim) + " but shape is NULL");
    Shape sizes(d.shape, d.shape + d.ndim);
    for (auto sz : sizes)
      if (sz < 0) throw ValueError("from_dlpack: negative size " + std::to_string(sz) + " in shape " + shape_str(sizes));
    Shape strides = d.strides && d.ndim ? Shape(d.strides, d.strides + d.ndim) : contiguous_strides(sizes);
    const std::uint64_t es = element_size(dt);
    if (d.byte_offset % es != 0)
      throw ValueError("from_dlpack: byte_offset " + std::to_string(d.byte_offset) +
                       " is not a multiple of the element size " + std::to_string(es));
    if (d.byte_offset > static_cast<std::uint64_t>(PTRDIFF_MAX))
      throw ValueError("from_dlpack: byte_offset " + std::to_string(d.byte_offset) + " is out of range");
    // Sizes, strides and byte size are checked by from_blob (huge strides are a ValueError,
    // never a wrapped-around span); it owns `rel` from here, also when it throws.
    void* first = static_cast<char*>(d.data) + d.byte_offset;
    std::function<void()> owner = std::move(rel);
    rel = nullptr;
    return from_blob(first, sizes, strides, dt, dev, pinned, std::move(owner));
  } catch (...) {
    if (rel) rel();
    throw;
  }
}
}  // namespace

DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& t, std::uint64_t flags) {
  auto* m = make<DLManagedTensorVersioned>(t);
  m->version = DLPackVersion{kMajorVersion, kMinorVersion};
  m->flags = flags;
  return m;
}
DLManagedTensor* to_dlpack(const Tensor& t) { return make<DLManagedTensor>(t); }

Tensor from_dlpack(DLManagedTensorVersioned* m, std::function<void(std::function<void()>)> release) {
  if (m && m->version.major != kMajorVersion) {
    auto major = m->version.major;
    if (m->deleter) m->deleter(m);
    throw ValueError("from_dlpack: DLPack major version " + std::to_string(major) + " is not supported (expected 1)");
  }
  return import(m, std::move(release));
}
Tensor from_dlpack(DLManagedTensor* m, std::function<void(std::function<void()>)> release) {
  return import(m, std::move(release));
}

}  // namespace cudakit::dlpack
