// Tensor metadata: storage ownership, views and shape arithmetic. Copies and fills are in
// src/ops (they need the executors).
#include "cudakit/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"

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
    acc *= std::max<std::int64_t>(sizes[i], 1);
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
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (r[i] == -1) {
      if (infer >= 0) throw ValueError("only one dimension can be inferred (-1) in shape " + shape_str(sizes));
      infer = static_cast<int>(i);
    } else if (r[i] < 0) {
      throw ValueError("invalid shape " + shape_str(sizes) + ": negative size");
    } else {
      known *= r[i];
    }
  }
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
  if (sizes_.size() != strides_.size())
    throw ValueError("sizes " + shape_str(sizes_) + " and strides " + shape_str(strides_) +
                     " must have the same length");
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
  if (sizes.size() != strides.size())
    throw ValueError("as_strided: sizes " + shape_str(sizes) + " and strides " + shape_str(strides) + " differ in length");
  // Bounds check so views never reach outside their storage.
  std::int64_t lo = offset, hi = offset;
  bool empty = false;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) throw ValueError("as_strided: negative size in " + shape_str(sizes));
    if (sizes[i] == 0) empty = true;
    if (strides[i] >= 0) hi += (sizes[i] - 1) * strides[i]; else lo += (sizes[i] - 1) * strides[i];
  }
  std::int64_t cap = static_cast<std::int64_t>(storage_->nbytes() / element_size());
  if (!empty && (lo < 0 || hi >= cap))
    throw ValueError("view of sizes " + shape_str(sizes) + " strides " + shape_str(strides) +
                     " offset " + std::to_string(offset) + " is out of bounds for a storage of " +
                     std::to_string(cap) + " elements");
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
      if (sizes[i] < 0) throw ValueError("expand: -1 not allowed for new leading dims");
      continue;
    }
    std::int64_t have = sizes_[i - lead];
    if (sizes[i] == -1) sizes[i] = have;
    if (have == sizes[i]) st[i] = strides_[i - lead];
    else if (have == 1) st[i] = 0;
    else
      throw ValueError("the expanded size of the tensor (" + std::to_string(sizes[i]) +
                       ") must match the existing size (" + std::to_string(have) +
                       ") at non-singleton dimension " + std::to_string(i) + ": cannot expand " +
                       shape_str(sizes_) + " to " + shape_str(sizes));
  }
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
  if (sizes.size() != strides.size()) throw ValueError("empty_strided: sizes and strides differ in length");
  std::int64_t extent = 1;
  bool zero = false;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) throw ValueError("negative dimension in shape " + shape_str(sizes));
    if (strides[i] < 0) throw ValueError("empty_strided: negative stride");
    if (sizes[i] == 0) zero = true;
    extent += (sizes[i] - 1) * strides[i];
  }
  if (zero) extent = 0;
  if (o.device.is_cuda() && o.pinned) throw ValueError("pinned=True applies to host tensors only");
  auto st = Storage::allocate(static_cast<std::size_t>(extent) * element_size(o.dtype), o.device, o.pinned);
  return Tensor(st, o.dtype, sizes, strides, 0);
}

Tensor zeros(const Shape& s, const TensorOptions& o) { return full(s, Scalar(0), o); }
Tensor ones(const Shape& s, const TensorOptions& o) { return full(s, Scalar(1), o); }
Tensor full(const Shape& s, const Scalar& v, const TensorOptions& o) {
  Tensor t = empty(s, o);
  t.fill_(v);
  return t;
}
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions{t.dtype(), t.device(), t.is_pinned()}); }

Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::optional<Shape> strides) {
  Shape st = strides ? *strides : contiguous_strides(sizes);
  std::int64_t extent = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) extent += (sizes[i] - 1) * st[i];
  auto s = Storage::external(data, static_cast<std::size_t>(std::max<std::int64_t>(extent, 0)) * element_size(dtype),
                             Device::cpu(), false, [] {});
  return Tensor(s, dtype, sizes, st, 0);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o) {
  if (step.d == 0) throw ValueError("arange: step must be nonzero");
  double n = std::ceil((end.d - start.d) / step.d);
  if ((end.kind == Scalar::Kind::integer || end.kind == Scalar::Kind::boolean) &&
      start.kind != Scalar::Kind::floating && step.kind != Scalar::Kind::floating) {
    std::int64_t a = start.i, b = end.i, s = step.i;
    n = s > 0 ? static_cast<double>((b - a + s - 1) / s) : static_cast<double>((a - b + (-s) - 1) / (-s));
  }
  if (n < 0) n = 0;
  auto count = static_cast<std::int64_t>(n);
  // Values are produced on the host (exactly, in the target dtype) and copied over.
  Tensor h = empty({count}, TensorOptions{DType::float64, Device::cpu()});
  Tensor hi = empty({count}, TensorOptions{DType::int64, Device::cpu()});
  bool integral = is_integral(o.dtype, true);
  for (std::int64_t k = 0; k < count; ++k) {
    if (integral) hi.data<std::int64_t>()[k] = start.i + k * step.i;
    else h.data<double>()[k] = start.d + static_cast<double>(k) * step.d;
  }
  Tensor r = empty({count}, o);
  r.copy_(integral ? hi : h);
  return r;
}

}  // namespace cudakit
