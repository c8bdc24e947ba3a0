// cudakit::Tensor — a small strided array over cudakit memory (device, pinned or pageable
// host), enough for users' glue work and for the APIs that take tensors (RNG state,
// collectives, graphs). Not a tensor library: a handful of views, copies and built-in ops
// (ops.hpp), and DLPack interop (dlpack.hpp) with every other framework.
//
// Semantics follow torch: sizes/strides in elements, a storage offset, views share storage,
// copies between devices are ordered on the current stream of the device involved and
// synchronous unless non_blocking=true.
//
// Thread-safety: a Tensor is a value (shared_ptr to its Storage + view metadata). Distinct
// Tensor objects may be used from different threads; concurrent writes to the same memory
// are the caller's problem, as in CUDA. Storage's lifetime is thread-safe (shared_ptr).
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

// ---- dtypes ----
// Order is part of the ABI of the built-in kernels (src/kernels/numeric.hpp).
enum class DType : std::uint8_t {
  bool_ = 0, uint8, int8, int16, int32, int64,
  float16, bfloat16, float32, float64, complex64, complex128
};
inline constexpr int kNumDTypes = 12;

std::size_t element_size(DType t) noexcept;
const char* dtype_name(DType t) noexcept;  // "float32", "bool", ... (torch's names)
// Parses "float32", "torch.float32", "cudakit.float32", "float", "half", "double", "long",
// "int", "short", "cfloat", "cdouble", numpy's "f4"/"<f4" style is not accepted here.
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
bool is_floating_point(DType t) noexcept;  // float16/bfloat16/float32/float64
bool is_complex(DType t) noexcept;
bool is_integral(DType t, bool include_bool) noexcept;
// torch.promote_types for the supported dtypes.
DType promote_types(DType a, DType b) noexcept;

// A Python-like scalar: keeps integers exact (int64) and remembers its category, which
// torch's type promotion needs ("wrapped numbers" do not up-cast dimensioned tensors).
struct Scalar {
  enum class Kind : std::uint8_t { boolean, integer, floating, complex };
  Kind kind = Kind::integer;
  std::int64_t i = 0;
  double d = 0.0;
  std::complex<double> c{};

  Scalar() = default;
  Scalar(bool v) : kind(Kind::boolean), i(v), d(v), c(v) {}
  Scalar(int v) : Scalar(static_cast<long long>(v)) {}
  Scalar(long v) : Scalar(static_cast<long long>(v)) {}
  Scalar(long long v) : kind(Kind::integer), i(static_cast<std::int64_t>(v)),
                        d(static_cast<double>(v)), c(static_cast<double>(v)) {}
  Scalar(unsigned v) : Scalar(static_cast<long long>(v)) {}
  Scalar(double v) : kind(Kind::floating), i(static_cast<std::int64_t>(v)), d(v), c(v) {}
  Scalar(float v) : Scalar(static_cast<double>(v)) {}
  Scalar(std::complex<double> v)
      : kind(Kind::complex), i(static_cast<std::int64_t>(v.real())), d(v.real()), c(v) {}
  // dtype a Python number of this kind gets on its own (bool, int64, float32, complex64).
  DType default_dtype() const noexcept;
};

// ---- devices ----
struct Device {
  enum class Type : std::uint8_t { cpu = 0, cuda = 1 };
  Type type = Type::cpu;
  int index = -1;  // -1 for cpu

  static Device cpu() noexcept { return Device{}; }
  // Resolves kCurrentDevice and validates the index.
  static Device cuda(int index = kCurrentDevice);
  // "cpu", "cuda", "cuda:N" (ValueError otherwise).
  static Device parse(std::string_view s);
  bool is_cuda() const noexcept { return type == Type::cuda; }
  bool is_cpu() const noexcept { return type == Type::cpu; }
  std::string str() const;  // "cpu" / "cuda:0"
  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.type == b.type && a.index == b.index;
  }
};

// ---- storage ----
// A contiguous block of bytes shared by tensors that view it. Owns either a cudakit
// Allocation or foreign memory (DLPack import) released through `release`.
class Storage {
 public:
  // nbytes==0 gives a storage with a null pointer. Device memory is ordered on `stream`
  // (default: the current stream of the device). Host memory is pinned if `pinned`.
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device, bool pinned = false,
                                           std::optional<StreamRef> stream = std::nullopt);
  // Wraps memory someone else owns; `release` runs (once, never throwing) on destruction.
  static std::shared_ptr<Storage> external(void* data, std::size_t nbytes, Device device,
                                           bool pinned, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }
  bool pinned() const noexcept { return pinned_; }
  bool is_external() const noexcept { return static_cast<bool>(release_); }
  // The stream cudakit's device memory is ordered on (its allocation stream); nullopt for
  // host memory and memory owned by someone else.
  std::optional<StreamRef> stream() const noexcept;

 private:
  Storage() = default;
  Allocation alloc_;
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  std::function<void()> release_;
};

using Shape = std::vector<std::int64_t>;

class Generator;

// Maximum rank the built-in ops support (views of any rank are fine).
inline constexpr int kMaxOpDims = 8;

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides,
         std::int64_t storage_offset = 0);

  bool defined() const noexcept { return static_cast<bool>(storage_); }
  DType dtype() const noexcept { return dtype_; }
  const Shape& sizes() const noexcept { return sizes_; }
  const Shape& shape() const noexcept { return sizes_; }
  const Shape& strides() const noexcept { return strides_; }
  std::int64_t size(std::int64_t dim) const;
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t storage_offset() const noexcept { return offset_; }
  std::int64_t dim() const noexcept { return static_cast<std::int64_t>(sizes_.size()); }
  std::int64_t numel() const noexcept;
  std::size_t element_size() const noexcept { return cudakit::element_size(dtype_); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * element_size(); }
  Device device() const noexcept;
  bool is_cuda() const noexcept { return device().is_cuda(); }
  bool is_pinned() const noexcept;  // host memory that is page-locked
  void* data_ptr() const noexcept;
  template <class T>
  T* data() const noexcept { return static_cast<T*>(data_ptr()); }
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  bool is_contiguous() const noexcept;
  // Whether the elements cover a dense range of memory in some order (no gaps, no overlap).
  bool is_non_overlapping_and_dense() const noexcept;

  // ---- views (share storage) ----
  Tensor as_strided(Shape sizes, Shape strides, std::int64_t storage_offset) const;
  Tensor view(Shape sizes) const;     // -1 infers one dim; ValueError if strides forbid
  Tensor reshape(Shape sizes) const;  // a view when possible, else a contiguous copy
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const;                   // dim <= 2
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor slice(std::int64_t dim, std::optional<std::int64_t> start,
               std::optional<std::int64_t> stop, std::int64_t step = 1) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;  // removes `dim`
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor expand(Shape sizes) const;   // broadcast view (stride 0)
  Tensor flatten() const { return reshape({-1}); }

  // ---- copies ----
  Tensor contiguous() const;
  Tensor clone() const;  // same device, contiguous
  // Copies `src` (any device, dtype, strides; broadcastable) into this tensor.
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int device = kCurrentDevice) const { return to(Device::cuda(device)); }
  Tensor pin_memory() const;  // host tensor in pinned memory (copy unless already pinned)
  // Marks the memory as used by `stream` (see allocation.hpp's record_stream).
  void record_stream(StreamRef stream) const;

  // ---- in-place fills ----
  // A fill kernel with the value as its argument (no copy, no synchronisation). A value that
  // does not fit the dtype throws cudakit::Error, as torch ("value cannot be converted to
  // type uint8_t without overflow"; negative integers wrap for uint8 down to -255).
  Tensor& fill_(const Scalar& value);
  Tensor& zero_() { return fill_(Scalar(0)); }
  Tensor& uniform_(double from = 0.0, double to = 1.0, Generator* generator = nullptr);
  Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* generator = nullptr);

  // Value of a one-element tensor of any shape (synchronizes for device tensors);
  // ValueError naming the element count otherwise.
  Scalar item() const;
  std::string to_string() const;  // "Tensor(shape=[2, 3], dtype=float32, device=cuda:0)"

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::float32;
  Shape sizes_, strides_;
  std::int64_t offset_ = 0;
};

// ---- factories ----
struct TensorOptions {
  DType dtype = DType::float32;
  Device device = Device::cpu();
  bool pinned = false;  // host tensors only
  TensorOptions& with_dtype(DType d) { dtype = d; return *this; }
  TensorOptions& with_device(Device d) { device = d; return *this; }
  TensorOptions& with_pinned(bool p) { pinned = p; return *this; }
};
inline TensorOptions device_options(DType dtype = DType::float32, int device = kCurrentDevice) {
  return TensorOptions{dtype, Device::cuda(device), false};
}

Shape contiguous_strides(const Shape& sizes);  // ValueError if the strides overflow
Tensor empty(const Shape& sizes, const TensorOptions& options = {});
Tensor empty_strided(const Shape& sizes, const Shape& strides, const TensorOptions& options = {});
Tensor zeros(const Shape& sizes, const TensorOptions& options = {});
Tensor ones(const Shape& sizes, const TensorOptions& options = {});
// full checks `value` against the dtype as fill_ does, before allocating.
Tensor full(const Shape& sizes, const Scalar& value, const TensorOptions& options = {});
// [start, end) by step; dtype int64 unless options say otherwise. Written by a kernel.
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step,
              const TensorOptions& options);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Host tensor viewing `data` (not owned; keep it alive) — e.g. a std::vector's buffer.
Tensor from_blob(void* data, const Shape& sizes, DType dtype,
                 std::optional<Shape> strides = std::nullopt);
// Tensor viewing memory someone else owns (NumPy arrays, DLPack producers): `data` is the
// address of element [0, ..., 0]; strides are in elements and may be negative or zero.
// `release` runs exactly once when the last view dies — or before this throws (bad sizes:
// ValueError / OutOfMemoryError as empty()). `device` is where the memory lives.
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype,
                 Device device, bool pinned, std::function<void()> release);

// Sizes are checked everywhere a shape becomes a count of elements or bytes: a negative
// size or more than 2**63-1 elements is a ValueError, a tensor larger than any allocation
// (over 2**63-1 bytes) an OutOfMemoryError carrying the requested bytes.

// Shape/stride helpers shared with the ops (pure functions, exposed for tests).
// Broadcast result of two shapes, ValueError naming both shapes if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Strides for viewing (sizes,strides) as new_sizes without copying, or nullopt.
std::optional<Shape> compute_view_strides(const Shape& sizes, const Shape& strides,
                                          const Shape& new_sizes);
// Resolves one -1 in `sizes` against numel (ValueError on mismatch).
Shape infer_size(const Shape& sizes, std::int64_t numel);
std::string shape_str(const Shape& s);  // "[2, 3]"

}  // namespace cudakit
