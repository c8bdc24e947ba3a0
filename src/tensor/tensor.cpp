// Tensor metadata: storage ownership, views and shape arithmetic. Copies and fills are in
// src/ops (they need the executors).
#include "cudakit/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "cudakit/error.hpp"
#include "ops/executor.hpp"
#include "tensor/size_math.hpp"

namespace cudakit {

// ---- Storage ----
std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device, bool pinned,
                                           std::optional<StreamRef> stream) {
  std::shared_ptr<Storage> s(new Storage());
  s->device_ = device;
  s->nbytes_ = nbytes;
  if (device.is_cuda()) {
    s->alloc_ = allocate_device(nbytes, device.index, stream);
  } else {
    s->alloc_ = allocate_host(nbytes, pinned);
    s->pinned_ = pinned;
  }
  s->data_ = s->alloc_.get();
  return s;
}

std::shared_ptr<Storage> Storage::external(void* data, std::size_t nbytes, Device device,
                                           bool pinned, std::function<void()> release) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->pinned_ = pinned;
  s->release_ = release ? std::move(release) : [] {};
  return s;
}

std::optional<StreamRef> Storage::stream() const noexcept {
  if (is_external() || !device_.is_cuda() || !data_) return std::nullopt;
  return alloc_.stream();
}

Storage::~Storage() {
  if (release_) {
    try {
      release_();
    } catch (...) {
    }
  }
}

// ---- shape helpers ----
std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  std::int64_t acc = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    // Zero-sized dims count as 1 (as torch), so a shape with a 0 can still overflow here.
    if (__builtin_mul_overflow(acc, std::max<std::int64_t>(sizes[i], 1), &acc) && i > 0)
      throw ValueError("shape " + shape_str(sizes) + " is too large: its strides overflow 64 bits");
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  std::size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      throw ValueError("shapes " + shape_str(a) + " and " + shape_str(b) +
                       " are not broadcastable: dimension " + std::to_string(i) + " is " +
                       std::to_string(x) + " vs " + std::to_string(y) +
                       " (sizes must match or one of them must be 1)");
    r[i] = x == 1 ? y : x;
  }
  return r;
}

Shape infer_size(const Shape& sizes, std::int64_t numel) {
  Shape r = sizes;
  Shape known_dims;
  int infer = -1;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (r[i] == -1) {
      if (infer >= 0) throw ValueError("only one dimension can be inferred (-1) in shape " + shape_str(sizes));
      infer = static_cast<int>(i);
    } else if (r[i] < 0) {
      throw ValueError("invalid shape " + shape_str(sizes) + ": negative size " + std::to_string(r[i]) +
                       " (only -1, meaning 'inferred', may be negative)");
    } else {
      known_dims.push_back(r[i]);
    }
  }
  const std::int64_t known = detail::checked_numel(known_dims, ("shape " + shape_str(sizes)).c_str());
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw ValueError("shape " + shape_str(sizes) + " is invalid for input of size " + std::to_string(numel));
    r[infer] = numel / known;
  } else if (known != numel) {
    throw ValueError("shape " + shape_str(sizes) + " is invalid for input of size " + std::to_string(numel));
  }
  return r;
}

// Same algorithm as torch's computeStride (public semantics): walk chunks of old dims that
// are contiguous with each other and split/merge them into the new dims.
std::optional<Shape> compute_view_strides(const Shape& old_sizes, const Shape& old_strides,
                                          const Shape& new_sizes) {
  std::int64_t numel = 1;
  for (auto s : old_sizes) numel *= s;
  Shape ns(new_sizes.size());
  if (numel == 0) return contiguous_strides(new_sizes);
  if (old_sizes.empty()) {
    std::fill(ns.begin(), ns.end(), 1);
    return ns;
  }
  std::int64_t view_d = static_cast<std::int64_t>(new_sizes.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// ---- Tensor ----
Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides,
               std::int64_t storage_offset)
    : storage_(std::move(storage)), dtype_(dtype), sizes_(std::move(sizes)),
      strides_(std::move(strides)), offset_(storage_offset) {
  // Every tensor passes here: its element count and byte size are representable and its
  // elements lie inside its storage, so later arithmetic (numel(), nbytes(), kernels'
  // offsets) cannot overflow or reach outside the allocation.
  const Device dev = device();
  const detail::StorageSpan sp = detail::checked_span(sizes_, strides_, dtype_, dev, "Tensor", /*allocation=*/false);
  if (sp.empty()) return;
  const auto es = static_cast<std::int64_t>(element_size());
  std::int64_t all_bytes = 0;
  if (__builtin_mul_overflow(sp.numel, es, &all_bytes))
    throw ValueError("a view of shape " + shape_str(sizes_) + " of " + dtype_name(dtype_) + " would have " +
                     std::to_string(sp.numel) + " elements of " + std::to_string(es) +
                     " bytes: nbytes over 2**63-1 is not supported");
  const std::int64_t cap = storage_ ? static_cast<std::int64_t>(storage_->nbytes()) / es : 0;
  std::int64_t lo = 0, hi = 0;
  if (__builtin_add_overflow(offset_, sp.lo, &lo) || __builtin_add_overflow(offset_, sp.hi, &hi) ||
      lo < 0 || hi >= cap)
    throw ValueError("view of sizes " + shape_str(sizes_) + " strides " + shape_str(strides_) +
                     " offset " + std::to_string(offset_) + " is out of bounds for a storage of " +
                     std::to_string(cap) + " elements");
}

static std::int64_t wrap_dim(std::int64_t d, std::int64_t ndim, bool allow_end = false) {
  std::int64_t n = ndim + (allow_end ? 1 : 0);
  if (n == 0) n = 1;  // 0-d tensors accept dim 0 / -1 (as torch)
  if (d < -n || d >= n)
    throw ValueError("dimension " + std::to_string(d) + " out of range (expected to be in [" +
                     std::to_string(-n) + ", " + std::to_string(n - 1) + "])");
  return d < 0 ? d + n : d;
}

std::int64_t Tensor::size(std::int64_t d) const { return sizes_[wrap_dim(d, dim())]; }
std::int64_t Tensor::stride(std::int64_t d) const { return strides_[wrap_dim(d, dim())]; }

std::int64_t Tensor::numel() const noexcept {
  std::int64_t n = 1;
  for (auto s : sizes_) n *= s;
  return n;
}

Device Tensor::device() const noexcept { return storage_ ? storage_->device() : Device::cpu(); }
bool Tensor::is_pinned() const noexcept { return storage_ && storage_->device().is_cpu() && storage_->pinned(); }

void* Tensor::data_ptr() const noexcept {
  if (!storage_ || !storage_->data()) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(element_size());
}

bool Tensor::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (std::size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (sizes_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

bool Tensor::is_non_overlapping_and_dense() const noexcept {
  if (is_contiguous()) return true;
  std::vector<std::size_t> perm(sizes_.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](auto a, auto b) {
    if (sizes_[a] < 2) return false;
    if (sizes_[b] < 2) return true;
    return strides_[a] < strides_[b];
  });
  std::int64_t expected = 1;
  for (auto p : perm) {
    if (sizes_[p] < 2) continue;
    if (strides_[p] != expected) return false;
    expected *= sizes_[p];
  }
  return true;
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, std::int64_t offset) const {
  if (!defined()) throw ValueError("as_strided on an undefined tensor");
  // Sizes, overflow and bounds are checked by the constructor (views never reach outside
  // their storage).
  detail::checked_span(sizes, strides, dtype_, device(), "as_strided", /*allocation=*/false);
  return Tensor(storage_, dtype_, std::move(sizes), std::move(strides), offset);
}

Tensor Tensor::view(Shape sizes) const {
  Shape ns = infer_size(sizes, numel());
  auto st = compute_view_strides(sizes_, strides_, ns);
  if (!st)
    throw ValueError("view size " + shape_str(ns) + " is not compatible with input tensor's size " +
                     shape_str(sizes_) + " and stride " + shape_str(strides_) +
                     " (at least one dimension spans across two contiguous subspaces); use "
                     ".reshape(...) instead");
  return Tensor(storage_, dtype_, ns, *st, offset_);
}

Tensor Tensor::reshape(Shape sizes) const {
  Shape ns = infer_size(sizes, numel());
  if (auto st = compute_view_strides(sizes_, strides_, ns)) return Tensor(storage_, dtype_, ns, *st, offset_);
  return contiguous().view(ns);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  if (dim() == 0) return *this;
  d0 = wrap_dim(d0, dim());
  d1 = wrap_dim(d1, dim());
  Shape sz = sizes_, st = strides_;
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor(storage_, dtype_, sz, st, offset_);
}

Tensor Tensor::t() const {
  if (dim() > 2) throw ValueError("t() expects a tensor with <= 2 dimensions, but self is " + std::to_string(dim()) + "D; use transpose() or permute()");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  if (static_cast<std::int64_t>(dims.size()) != dim())
    throw ValueError("permute: number of dims (" + std::to_string(dims.size()) + ") does not match tensor rank " + std::to_string(dim()));
  Shape sz(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto d = wrap_dim(dims[i], dim());
    if (seen[d]) throw ValueError("permute: repeated dim " + std::to_string(dims[i]));
    seen[d] = true;
    sz[i] = sizes_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, dtype_, sz, st, offset_);
}

Tensor Tensor::slice(std::int64_t d, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> stop, std::int64_t step) const {
  if (dim() == 0) throw ValueError("cannot slice a 0-d tensor");
  d = wrap_dim(d, dim());
  if (step <= 0) throw ValueError("slice step must be positive (got " + std::to_string(step) + ")");
  std::int64_t n = sizes_[d];
  auto clampi = [n](std::int64_t v) { if (v < 0) v += n; return std::clamp<std::int64_t>(v, 0, n); };
  std::int64_t b = start ? clampi(*start) : 0;
  std::int64_t e = stop ? clampi(*stop) : n;
  std::int64_t len = e > b ? (e - b + step - 1) / step : 0;
  Shape sz = sizes_, st = strides_;
  sz[d] = len;
  st[d] = strides_[d] * step;
  return Tensor(storage_, dtype_, sz, st, offset_ + (len ? b * strides_[d] : 0));
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  if (dim() == 0) throw ValueError("select() cannot be applied to a 0-d tensor");
  d = wrap_dim(d, dim());
  std::int64_t n = sizes_[d];
  if (index < -n || index >= n)
    throw ValueError("index " + std::to_string(index) + " is out of bounds for dimension " +
                     std::to_string(d) + " with size " + std::to_string(n));
  if (index < 0) index += n;
  Shape sz = sizes_, st = strides_;
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, dtype_, sz, st, offset_ + index * strides_[d]);
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim(d, dim(), true);
  Shape sz = sizes_, st = strides_;
  std::int64_t s = d < dim() ? sizes_[d] * strides_[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return Tensor(storage_, dtype_, sz, st, offset_);
}

Tensor Tensor::squeeze(std::int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim());
  if (sizes_[d] != 1) return *this;
  Shape sz = sizes_, st = strides_;
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, dtype_, sz, st, offset_);
}

Tensor Tensor::expand(Shape sizes) const {
  if (sizes.size() < sizes_.size())
    throw ValueError("expand: target shape " + shape_str(sizes) + " has fewer dimensions than " + shape_str(sizes_));
  std::size_t lead = sizes.size() - sizes_.size();
  Shape st(sizes.size(), 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      if (sizes[i] < 0)
        throw ValueError("expand: invalid size " + std::to_string(sizes[i]) + " for new leading dimension " +
                         std::to_string(i) + " of " + shape_str(sizes) + " (-1 is only allowed for existing dims)");
      continue;
    }
    std::int64_t have = sizes_[i - lead];
    if (sizes[i] == -1) sizes[i] = have;
    if (sizes[i] < 0)
      throw ValueError("expand: invalid size " + std::to_string(sizes[i]) + " in " + shape_str(sizes) +
                       " (sizes must be >= 0, or -1 to keep a dimension)");
    if (have == sizes[i]) st[i] = strides_[i - lead];
    else if (have == 1) st[i] = 0;
    else
      throw ValueError("the expanded size of the tensor (" + std::to_string(sizes[i]) +
                       ") must match the existing size (" + std::to_string(have) +
                       ") at non-singleton dimension " + std::to_string(i) + ": cannot expand " +
                       shape_str(sizes_) + " to " + shape_str(sizes));
  }
  detail::checked_numel(sizes, "expand");  // a broadcast view may not have > 2**63-1 elements
  return Tensor(storage_, dtype_, sizes, st, offset_);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor r = empty(sizes_, TensorOptions{dtype_, device(), is_pinned()});
  r.copy_(*this);
  return r;
}

Tensor Tensor::to(Device d, bool nb) const { return to(d, dtype_, nb); }
Tensor Tensor::to(DType t, bool nb) const { return to(device(), t, nb); }
Tensor Tensor::to(Device d, DType t, bool nb) const {
  if (d == device() && t == dtype_) return *this;
  Tensor r = empty(sizes_, TensorOptions{t, d, d.is_cpu() && nb});
  r.copy_(*this, nb);
  return r;
}

Tensor Tensor::pin_memory() const {
  if (is_cuda()) throw ValueError("pin_memory(): cannot pin a device tensor (it is already device memory); call .cpu() first");
  if (is_pinned()) return *this;
  Tensor r = empty(sizes_, TensorOptions{dtype_, Device::cpu(), true});
  r.copy_(*this);
  return r;
}

void Tensor::record_stream(StreamRef stream) const {
  if (!is_cuda()) throw ValueError("record_stream() expects a device tensor; this one is on " + device().str());
  if (stream.device() != device().index)
    throw ValueError("record_stream(): the stream is on cuda:" + std::to_string(stream.device()) +
                     " but the tensor is on " + device().str() + "; pass a stream of the tensor's device");
  if (storage_->is_external()) return;  // memory owned by another framework
  if (storage_->data()) cudakit::record_stream(storage_->data(), stream);
}

std::string Tensor::to_string() const {
  return "Tensor(shape=" + shape_str(sizes_) + ", dtype=" + dtype_name(dtype_) +
         ", device=" + device().str() + ")";
}

// ---- factories ----
Tensor empty(const Shape& sizes, const TensorOptions& o) {
  return empty_strided(sizes, contiguous_strides(sizes), o);
}

Tensor empty_strided(const Shape& sizes, const Shape& strides, const TensorOptions& o) {
  for (std::size_t i = 0; i < strides.size(); ++i)
    if (strides[i] < 0)
      throw ValueError("empty_strided: negative stride " + std::to_string(strides[i]) + " in " + shape_str(strides));
  if (o.device.is_cuda() && o.pinned) throw ValueError("pinned=True applies to host tensors only");
  const detail::StorageSpan sp = detail::checked_span(sizes, strides, o.dtype, o.device, "empty()");
  auto st = Storage::allocate(sp.nbytes, o.device, o.pinned);
  return Tensor(st, o.dtype, sizes, strides, 0);
}

Tensor zeros(const Shape& s, const TensorOptions& o) { return full(s, Scalar(0), o); }
Tensor ones(const Shape& s, const TensorOptions& o) { return full(s, Scalar(1), o); }
Tensor full(const Shape& s, const Scalar& v, const TensorOptions& o) {
  unsigned char bytes[16];
  ops::scalar_to_bytes(v, o.dtype, bytes, "full");  // an overflowing value fails before allocating
  Tensor t = empty(s, o);
  t.fill_(v);
  return t;
}
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }

Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::optional<Shape> strides) {
  return from_blob(data, sizes, strides ? *strides : contiguous_strides(sizes), dtype, Device::cpu(),
                   false, nullptr);
}

Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype, Device device,
                 bool pinned, std::function<void()> release) {
  try {
    const detail::StorageSpan sp = detail::checked_span(sizes, strides, dtype, device, "from_blob", /*allocation=*/false);
    // The storage starts at the lowest element reached (negative strides point below data).
    const auto es = static_cast<std::int64_t>(element_size(dtype));
    char* base = static_cast<char*>(data) + (sp.empty() ? 0 : sp.lo * es);
    auto s = Storage::external(sp.empty() ? data : base, sp.nbytes, device, pinned,
                               release ? release : std::function<void()>([] {}));
    release = nullptr;  // the storage owns it now
    return Tensor(s, dtype, sizes, strides, sp.empty() ? 0 : -sp.lo);
  } catch (...) {
    if (release) release();
    throw;
  }
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o) {
  const bool integral_args = start.kind != Scalar::Kind::floating && end.kind != Scalar::Kind::floating &&
                             step.kind != Scalar::Kind::floating;
  if (!integral_args && !(std::isfinite(start.d) && std::isfinite(end.d) && std::isfinite(step.d)))
    throw ValueError("arange: start, end and step must be finite, got start=" + std::to_string(start.d) +
                     " end=" + std::to_string(end.d) + " step=" + std::to_string(step.d));
  if (step.d == 0) throw ValueError("arange: step must be nonzero");
  if ((end.d - start.d) / step.d < 0 && end.d != start.d)
    throw ValueError("arange: upper bound and larger bound inconsistent with step sign (start=" +
                     std::to_string(start.d) + ", end=" + std::to_string(end.d) + ", step=" +
                     std::to_string(step.d) + ")");
  // Element count, exact for integers (128-bit: end - start may not fit 64 bits).
  long double n = 0;
  if (integral_args) {
    __int128 a = start.i, b = end.i, s = step.i;
    n = static_cast<long double>(s > 0 ? (b - a + s - 1) / s : (a - b - s - 1) / -s);
  } else {
    n = std::ceil(static_cast<long double>(end.d - start.d) / static_cast<long double>(step.d));
  }
  if (n < 0) n = 0;
  if (n > static_cast<long double>(INT64_MAX))
    throw ValueError("arange: [" + std::to_string(start.d) + ", " + std::to_string(end.d) + ") with step " +
                     std::to_string(step.d) + " has more than 2**63-1 elements");
  Tensor r = empty({static_cast<std::int64_t>(n)}, o);
  // A kernel writes the values (exact in int64 or float64, then converted): no staging
  // buffer and no host-to-device copy, so arange neither synchronises nor breaks a capture.
  ops::ArangeArgs args{};
  args.out = r.data_ptr();
  args.n = r.numel();
  args.integral = is_integral(o.dtype, true) ? 1 : 0;
  args.start_i = start.i;
  args.step_i = step.i;
  args.start_d = start.d;
  args.step_d = step.d;
  if (args.n == 0) return r;
  const Device d = r.device();
  ops::sanitize("arange", d, {}, {{&r, nullptr}});
  const int c = ops::code(o.dtype);
  if (ops::exec_for(d) == ops::Exec::cuda) ops::cuda_arange(d.index, ops::stream_for(d), args, c);
  else ops::run_cpu(d, {r.storage()}, [args, c] { ops::cpu_arange(args, c); }, "ck_arange");
  return r;
}

}  // namespace cudakit
