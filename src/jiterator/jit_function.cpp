// JitFunction: validation, type promotion and broadcasting (the built-in ops' rules, from
// src/ops), the choice of specialisation, the parameter block and the launch.
//
// Per call, after the first: no lock and no compile. A function keeps the specialisations it
// has launched in a lock-free list (pushed once per new specialisation, never removed), so
// the repeat path is a short linear scan comparing KernelSpec values.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "backend/device_ops.hpp"
#include "backend/kernel_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/jiterator.hpp"
#include "cudakit/stream.hpp"
#include "jiterator/codegen.hpp"
#include "jiterator/disk_cache.hpp"
#include "jiterator/kernel_cache.hpp"
#include "jiterator/parse.hpp"
#include "jiterator/spec.hpp"
#include "ops/executor.hpp"
#include "ops/promotion.hpp"

namespace cudakit::jiterator {

CompileError::CompileError(const std::string& what, std::string log, int line)
    : Error(what), log_(std::move(log)), line_(line) {}

struct JitFunction::Impl {
  std::string code;
  jit::ParsedCode parsed;
  std::string symbol;
  std::vector<Param> params;
  int num_outputs = 1;
  bool return_by_ref = false;

  struct Compiled {
    jit::KernelSpec spec;
    int device;
    detail::FunctionHandle fn;
    Compiled* next;
  };
  mutable std::atomic<Compiled*> head{nullptr};
  mutable std::atomic<std::size_t> count{0};

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    for (Compiled* c = head.load(); c;) {
      Compiled* next = c->next;
      delete c;
      c = next;
    }
  }

  std::string who() const { return "jiterator function '" + parsed.name + "'"; }
  detail::FunctionHandle kernel(const jit::KernelSpec& spec, int device) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Param>& overrides) const;
};

namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string param_names(const std::vector<Param>& ps) {
  if (ps.empty()) return "none";
  std::string s;
  for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

// Strides of the outputs: the memory order of the first input that covers the broadcast
// shape densely (as torch's outputs follow their inputs' layout: a transposed input gives a
// transposed output and keeps the linear fast path), else contiguous.
Shape output_strides(const Shape& shape, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) {
    if (t.sizes() != shape || t.is_contiguous() || !t.is_non_overlapping_and_dense()) continue;
    std::vector<std::size_t> order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return t.strides()[a] > t.strides()[b]; });
    Shape st(shape.size());
    std::int64_t s = 1;
    for (std::size_t i = order.size(); i-- > 0;) {
      st[order[i]] = s;
      s *= std::max<std::int64_t>(shape[order[i]], 1);
    }
    return st;
  }
  return contiguous_strides(shape);
}

// Multiply-high magic numbers for dividing 32-bit indices by `d` (1 < d < 2^31): with
// shift = ceil(log2 d) and m1 = floor(2^32 (2^shift - d) / d) + 1, n / d equals
// (umulhi(n, m1) + n) >> shift for every n < 2^31 (Granlund & Montgomery).
void magic(std::int64_t d, std::uint32_t& m1, std::uint32_t& shift) {
  shift = 0;
  while ((std::int64_t{1} << shift) < d) ++shift;
  const std::uint64_t two32 = std::uint64_t{1} << 32;
  m1 = static_cast<std::uint32_t>(two32 * ((std::uint64_t{1} << shift) - static_cast<std::uint64_t>(d)) /
                                      static_cast<std::uint64_t>(d) + 1);
}

// Largest |offset| any element of an operand reaches (elements).
std::int64_t span(const ops::OffsetCalc<16>& c, int k) {
  std::int64_t s = 0;
  for (int d = 0; d < c.ndim; ++d) {
    const std::int64_t st = c.strides[k][d] < 0 ? -c.strides[k][d] : c.strides[k][d];
    if (st != 0 && c.sizes[d] - 1 > (LLONG_MAX - s) / st) return LLONG_MAX;
    s += (c.sizes[d] - 1) * st;
  }
  return s;
}

// Below this many elements (and offsets), 32-bit indices cannot overflow: n plus one tile of
// the widest launch stays under 2^31.
constexpr std::int64_t kIndex32Limit = (std::int64_t{1} << 31) - (std::int64_t{1} << 20);

std::atomic<bool> g_force_index64{false};

}  // namespace
}  // namespace cudakit::jiterator

namespace cudakit::jit {
int unroll_override() noexcept {
  static const int v = [] {
    const char* e = std::getenv("CUDAKIT_JITERATOR_UNROLL");
    const int u = e ? std::atoi(e) : 0;
    return (u == 1 || u == 2 || u == 4 || u == 8) ? u : 0;
  }();
  return v;
}
void set_force_index64(bool on) noexcept {
  jiterator::g_force_index64.store(on, std::memory_order_relaxed);
}
}  // namespace cudakit::jit

namespace cudakit::jiterator {

detail::FunctionHandle JitFunction::Impl::kernel(const jit::KernelSpec& spec, int device) const {
  for (Compiled* c = head.load(std::memory_order_acquire); c; c = c->next)
    if (c->device == device && c->spec == spec) return c->fn;
  const std::string source = jit::generate_source(code, parsed, spec);
  detail::FunctionHandle fn =
      jit::get_kernel(device, jit::KernelRequest{source, symbol, parsed.name, code});
  auto* node = new Compiled{spec, device, fn, head.load(std::memory_order_relaxed)};
  while (!head.compare_exchange_weak(node->next, node, std::memory_order_release,
                                     std::memory_order_relaxed)) {
  }
  count.fetch_add(1, std::memory_order_relaxed);
  return fn;
}

std::vector<Tensor> JitFunction::Impl::run(const std::vector<Tensor>& inputs,
                                           const std::vector<Param>& overrides) const {
  const int nin = static_cast<int>(inputs.size());
  const int nout = num_outputs;
  if (nin < 1 || nin > kMaxInputs)
    throw ValueError(who() + ": takes 1 to " + std::to_string(kMaxInputs) +
                     " tensor arguments, got " + std::to_string(nin));
  Device device;
  for (int i = 0; i < nin; ++i) {
    const Tensor& t = inputs[static_cast<std::size_t>(i)];
    if (!t.defined()) throw ValueError(who() + ": argument " + std::to_string(i + 1) + " is an undefined tensor");
    if (!t.is_cuda())
      throw ValueError(who() + ": argument " + std::to_string(i + 1) + " is a " + t.device().str() +
                       " tensor; jitted functions run on device tensors (move it with .cuda())");
    if (i == 0) device = t.device();
    if (!(t.device() == device))
      throw ValueError(who() + ": expected all tensors to be on the same device, but found " +
                       device.str() + " and " + t.device().str() + " (argument " +
                       std::to_string(i + 1) + ")");
  }

  // Scalar parameters: declared defaults, replaced by name.
  std::vector<Scalar> values;
  values.reserve(params.size());
  for (const Param& p : params) values.push_back(p.value);
  for (const Param& o : overrides) {
    auto it = std::find_if(params.begin(), params.end(), [&](const Param& p) { return p.name == o.name; });
    if (it == params.end())
      throw ValueError(who() + ": '" + o.name + "' is not a declared parameter (declared: " +
                       param_names(params) + "); declare it with a default when creating the function");
    values[static_cast<std::size_t>(it - params.begin())] = o.value;
  }
  const int nparams = static_cast<int>(params.size());
  const int passed = nin + nparams + (return_by_ref ? nout : 0);
  if (passed > parsed.num_params || passed < parsed.num_params - parsed.num_defaulted)
    throw ValueError(who() + " takes " + std::to_string(parsed.num_params) +
                     " parameters, but the call passes " + std::to_string(nin) + " tensor(s), " +
                     std::to_string(nparams) + " scalar parameter(s) (" + param_names(params) + ")" +
                     (return_by_ref ? " and " + std::to_string(nout) + " output(s)" : "") +
                     ": tensors come first, then the scalar parameters declared at creation" +
                     (return_by_ref ? ", then the T& outputs" : ""));

  // Promotion and broadcasting, as the built-in ops.
  ops::ResultType rt;
  Shape shape = inputs[0].sizes();
  for (const Tensor& t : inputs) {
    rt.tensor(t);
    shape = broadcast_shapes(shape, t.sizes());
  }
  const DType common = rt.result();
  const Shape out_strides = output_strides(shape, inputs);
  const TensorOptions opts{common, device, false};
  std::vector<Tensor> outs;
  outs.reserve(static_cast<std::size_t>(nout));
  for (int k = 0; k < nout; ++k) outs.push_back(empty_strided(shape, out_strides, opts));
  const std::int64_t n = outs[0].numel();
  if (n == 0) return outs;

  // Operands (outputs first), dims ordered by the outputs' strides so that dense operands in
  // the outputs' memory order collapse to one dimension.
  const int nt = nin + nout;
  std::vector<Tensor> views;
  views.reserve(static_cast<std::size_t>(nt));
  for (const Tensor& o : outs) views.push_back(o);
  for (const Tensor& t : inputs) views.push_back(t.expand(shape));
  std::vector<std::size_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return out_strides[a] > out_strides[b]; });
  Shape sizes;
  std::vector<Shape> strides(static_cast<std::size_t>(nt));
  for (std::size_t d : order) {
    sizes.push_back(shape[d]);
    for (int k = 0; k < nt; ++k) strides[static_cast<std::size_t>(k)].push_back(views[static_cast<std::size_t>(k)].strides()[d]);
  }
  std::array<const Shape*, 16> ptrs;
  for (int k = 0; k < 16; ++k) ptrs[static_cast<std::size_t>(k)] = &strides[static_cast<std::size_t>(k < nt ? k : 0)];
  ops::OffsetCalc<16> calc;
  try {
    calc = ops::make_calc<16>(sizes, ptrs);
  } catch (const NotSupportedError&) {
    throw NotSupportedError(who() + ": the operands keep more than " + std::to_string(jit::kMaxDims) +
                            " dimensions after merging the contiguous ones; call .contiguous() on "
                            "the inputs first");
  }

  jit::KernelSpec spec;
  spec.nin = static_cast<std::int8_t>(nin);
  spec.nout = static_cast<std::int8_t>(nout);
  spec.return_by_ref = return_by_ref;
  spec.common = common;
  spec.nparams = static_cast<std::int8_t>(nparams);
  for (int i = 0; i < nin; ++i) spec.inputs[i] = inputs[static_cast<std::size_t>(i)].dtype();
  for (int j = 0; j < nparams; ++j) spec.params[j] = values[static_cast<std::size_t>(j)].kind;
  bool linear = calc.ndim == 0;
  if (calc.ndim == 1) {
    linear = true;
    for (int k = 0; k < nt; ++k) linear = linear && calc.strides[k][0] == 1;
  }
  spec.contiguous = linear;
  std::int64_t max_span = 0;
  for (int k = 0; k < nt; ++k) max_span = std::max(max_span, span(calc, k));
  spec.index64 = n >= kIndex32Limit || max_span >= kIndex32Limit ||
                 g_force_index64.load(std::memory_order_relaxed);
  // Device kernels: 16-byte accesses where every operand is aligned for them; more items
  // per thread for fewer operands (register pressure grows with each).
  static const bool device_kernels = detail::device_ops().capabilities().runs_kernels;
  if (device_kernels) {
    std::size_t widest = 1;
    for (const Tensor& v : views) widest = std::max(widest, v.element_size());
    int vec = spec.contiguous ? static_cast<int>(16 / widest) : 1;
    auto aligned = [&](int v) {
      for (const Tensor& t : views)
        if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % (static_cast<std::uintptr_t>(v) * t.element_size()))
          return false;
      return true;
    };
    while (vec > 1 && !aligned(vec)) vec /= 2;
    spec.vec = static_cast<std::int8_t>(std::max(vec, 1));
    const int unroll = jit::unroll_override();
    spec.unroll = static_cast<std::int8_t>(unroll ? unroll : nt <= 4 ? 4 : nt <= 8 ? 2 : 1);
  }  // host kernels loop over every element: vec / unroll stay 1 (one image per layout)

  const int dev = device.index;
  const detail::FunctionHandle fn = kernel(spec, dev);

  // The parameter block (spec.hpp).
  const jit::ParamLayout lay = jit::layout_of(spec);
  alignas(16) unsigned char block[jit::kMaxParamBytes] = {};
  auto put = [&](std::size_t off, const void* v, std::size_t bytes) { std::memcpy(block + off, v, bytes); };
  const long long n64 = n, ndim = calc.ndim;
  put(0, &n64, 8);
  put(8, &ndim, 8);
  for (int k = 0; k < nt; ++k) {
    void* p = views[static_cast<std::size_t>(k)].data_ptr();
    put(lay.data_offset() + 8 * static_cast<std::size_t>(k), &p, 8);
  }
  if (!spec.contiguous) {
    for (int d = 0; d < calc.ndim; ++d) {
      const long long size = calc.sizes[d];
      std::uint32_t m1 = 0, shift = 0;
      if (!spec.index64) magic(size, m1, shift);
      const std::size_t at = lay.dims_offset() + 16 * static_cast<std::size_t>(d);
      put(at, &size, 8);
      put(at + 8, &m1, 4);
      put(at + 12, &shift, 4);
      for (int k = 0; k < nt; ++k) {
        const long long st = calc.strides[k][d];
        put(lay.strides_offset() + 8 * (static_cast<std::size_t>(d) * static_cast<std::size_t>(nt) + static_cast<std::size_t>(k)), &st, 8);
      }
    }
  }
  for (int j = 0; j < nparams; ++j) {
    const Scalar& v = values[static_cast<std::size_t>(j)];
    const std::size_t at = lay.params_offset() + 16 * static_cast<std::size_t>(j);
    switch (v.kind) {
      case Scalar::Kind::boolean: { const bool b = v.i != 0; put(at, &b, 1); break; }
      case Scalar::Kind::integer: { const long long i = v.i; put(at, &i, 8); break; }
      case Scalar::Kind::floating: { const double d = v.d; put(at, &d, 8); break; }
      case Scalar::Kind::complex: {
        const double re = v.c.real(), im = v.c.imag();
        put(at, &re, 8);
        put(at + 8, &im, 8);
        break;
      }
    }
  }

  const std::int64_t per_block = std::int64_t{jit::kBlock} * spec.vec * spec.unroll;
  const std::int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks > INT_MAX)
    throw NotSupportedError(who() + ": " + std::to_string(n) + " elements need more than 2^31 - 1 blocks");
  auto keep = std::make_shared<std::vector<std::shared_ptr<Storage>>>();
  keep->reserve(static_cast<std::size_t>(nt));
  for (const Tensor& v : views) keep->push_back(v.storage());
  DeviceGuard on(dev);  // the module belongs to `dev`'s context (see ops::go)
  detail::kernel_ops().launch_runtime_kernel(fn, detail::Dim3{static_cast<unsigned>(blocks), 1, 1},
                                          detail::Dim3{static_cast<unsigned>(jit::kBlock), 1, 1},
                                          current_stream(dev).handle(), block, lay.size(),
                                          std::move(keep));
  return outs;
}

JitFunction::JitFunction(std::string code, std::vector<Param> params, int num_outputs, bool return_by_ref) {
  if (num_outputs < 1 || num_outputs > kMaxOutputs)
    throw ValueError("jiterator: num_outputs must be 1 to " + std::to_string(kMaxOutputs) + ", got " +
                     std::to_string(num_outputs));
  if (!return_by_ref && num_outputs != 1)
    throw ValueError("jiterator: a function returning by value has one output (got num_outputs=" +
                     std::to_string(num_outputs) + "); use create_multi_output_jit_fn with T& outputs");
  if (params.size() > static_cast<std::size_t>(kMaxParams))
    throw ValueError("jiterator: at most " + std::to_string(kMaxParams) + " scalar parameters, got " +
                     std::to_string(params.size()));
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!valid_name(params[i].name))
      throw ValueError("jiterator: parameter name '" + params[i].name + "' is not an identifier");
    for (std::size_t j = 0; j < i; ++j)
      if (params[j].name == params[i].name)
        throw ValueError("jiterator: parameter '" + params[i].name + "' is declared twice");
  }
  auto impl = std::make_shared<Impl>();
  impl->parsed = jit::parse_code(code);
  if (!return_by_ref && impl->parsed.return_type == "void")
    throw ValueError("jiterator: '" + impl->parsed.name +
                     "' returns void; a single-output function returns its result by value "
                     "(for T& outputs use create_multi_output_jit_fn / _create_multi_output_jit_fn)");
  if (return_by_ref && impl->parsed.return_type != "void")
    throw ValueError("jiterator: '" + impl->parsed.name + "' returns " + impl->parsed.return_type +
                     "; a multi-output function returns void and writes its T& outputs, which "
                     "come after the inputs and the scalar parameters");
  if (return_by_ref) {
    // The outputs are the last num_outputs parameters. One passed by value is a copy: the
    // kernel's writes to it are lost and the output tensor is never written (torch says
    // nothing and returns garbage). A reference has '&' outside any template arguments.
    const auto& ps = impl->parsed.params;
    const int first = static_cast<int>(ps.size()) - num_outputs;
    for (int i = std::max(first, 0); i < static_cast<int>(ps.size()); ++i) {
      int depth = 0;
      bool ref = false;
      for (char c : ps[static_cast<std::size_t>(i)]) {
        if (c == '<') ++depth;
        if (c == '>') --depth;
        if (c == '&' && depth == 0) ref = true;
      }
      if (!ref) {
        throw ValueError("jiterator: output " + std::to_string(i - first) + " of '" +
                         impl->parsed.name + "' ('" + ps[static_cast<std::size_t>(i)] +
                         "') is passed by value, so what the kernel writes to it is lost and "
                         "the output is never written; declare it as a reference (T& name)");
      }
    }
  }
  impl->code = std::move(code);
  impl->symbol = jit::kernel_symbol(impl->parsed);
  impl->params = std::move(params);
  impl->num_outputs = num_outputs;
  impl->return_by_ref = return_by_ref;
  impl_ = std::move(impl);
}

Tensor JitFunction::operator()(const std::vector<Tensor>& inputs, const std::vector<Param>& overrides) const {
  if (impl_->num_outputs != 1)
    throw ValueError(impl_->who() + " has " + std::to_string(impl_->num_outputs) +
                     " outputs: call run() for all of them");
  return impl_->run(inputs, overrides)[0];
}

std::vector<Tensor> JitFunction::run(const std::vector<Tensor>& inputs,
                                     const std::vector<Param>& overrides) const {
  return impl_->run(inputs, overrides);
}

const std::string& JitFunction::name() const noexcept { return impl_->parsed.name; }
const std::string& JitFunction::code() const noexcept { return impl_->code; }
int JitFunction::num_outputs() const noexcept { return impl_->num_outputs; }
bool JitFunction::return_by_ref() const noexcept { return impl_->return_by_ref; }
const std::vector<Param>& JitFunction::params() const noexcept { return impl_->params; }
std::size_t JitFunction::num_kernels() const noexcept { return impl_->count.load(std::memory_order_relaxed); }

JitFunction create_jit_fn(std::string code, std::vector<Param> params) {
  return JitFunction(std::move(code), std::move(params), 1, false);
}
JitFunction create_multi_output_jit_fn(std::string code, int num_outputs, std::vector<Param> params) {
  return JitFunction(std::move(code), std::move(params), num_outputs, true);
}

std::string cache_dir() { return jit::DiskCache::instance().dir(); }
CacheStats cache_stats() noexcept { return jit::stats(); }

}  // namespace cudakit::jiterator
