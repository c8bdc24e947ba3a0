// Op descriptions: validation, type promotion, broadcasting, then one executor call.
#include "cudakit/ops.hpp"

#include <atomic>
#include <cstdint>

#include "cudakit/error.hpp"
#include "kernels/compare_pow.hpp"
#include "ops/executor.hpp"
#include "ops/promotion.hpp"

namespace cudakit {
using namespace ops;

void ops::check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (!a.defined() || !b.defined()) throw ValueError(std::string(op) + ": undefined tensor operand");
  if (!(a.device() == b.device()))
    throw ValueError(std::string(op) + ": expected all tensors to be on the same device, but found " +
                     a.device().str() + " and " + b.device().str() +
                     "; move one with .to(device) first");
}

namespace {
int category(DType t) {
  if (t == DType::bool_) return 0;
  if (is_integral(t, false)) return 1;
  if (is_floating_point(t)) return 2;
  return 3;
}

// Which executor function a binary op runs: arithmetic (BinaryOp), a comparison
// (CompareOp, bool output) or pow.
enum class Family { arith, compare, pow };

void launch_scalar(const Tensor& ca, const ScalarValue& v, Family fam, int op, const char* name, bool reverse,
                   DType rt, const Tensor& out, bool out_is_self);

// Runs a binary / compare / pow kernel described by `args` on d's executor. The CPU task holds
// the operands' storages until it ran (b: null for a number); the CUDA path copies nothing.
void launch_binary(Family fam, const Device& d, const BinaryArgs& args, int c, const Tensor& out,
                   const Tensor& a, const Tensor* b) {
  if (exec_for(d) == Exec::cuda) {
    if (fam == Family::arith) cuda_binary(d.index, stream_for(d), args, c);
    else if (fam == Family::compare) cuda_compare(d.index, stream_for(d), args, c);
    else cuda_pow(d.index, stream_for(d), args, c);
    return;
  }
  static constexpr const char* kNames[] = {"ck_binary", "ck_compare", "ck_pow"};
  std::vector<std::shared_ptr<Storage>> keep{out.storage(), a.storage()};
  if (b) keep.push_back(b->storage());
  run_cpu(d, std::move(keep), [args, fam, c] {
    if (fam == Family::arith) cpu_binary(args, c);
    else if (fam == Family::compare) cpu_compare(args, c);
    else cpu_pow(args, c);
  }, kNames[fam == Family::arith ? 0 : fam == Family::compare ? 1 : 2]);
}

// The op's own rules on the promoted dtype `rt` of its two operands (tensors or a tensor and a
// number): pairs it refuses, and true division's float result. Promotion gives bool only when
// both operands are bool.
DType apply_op_rules(Family fam, int op, const char* name, DType rt) {
  if (fam == Family::arith && op == kSub && rt == DType::bool_)
    throw ValueError("sub: subtraction with two bool operands is not supported; use logical ops or cast to an integer dtype");
  if (fam == Family::arith && op == kDiv && is_integral(rt, true)) return DType::float32;  // true division
  if (fam == Family::compare && is_complex(rt) && op != kEq && op != kNe)
    throw ValueError(std::string(name) + " is not supported for complex tensors (" + dtype_name(rt) +
                     "): complex numbers have no order; compare .real/.abs() values instead");
  if (fam == Family::pow && rt == DType::bool_)
    throw ValueError("pow is not supported for two bool operands; cast one to an integer or float dtype");
  return rt;
}

Tensor binary(const Tensor& a, const Tensor& b, Family fam, int op, const char* name, DType rt,
              Tensor* out_opt = nullptr) {
  if (!a.defined() || !b.defined()) throw ValueError(std::string(name) + ": undefined tensor operand");
  // A host 0-d tensor next to a device tensor acts as a scalar, as in torch: its value is
  // read on the host (no copy to the device, no synchronisation) and passed by value.
  const bool b_host = b.dim() == 0 && b.device().is_cpu() && a.is_cuda();
  const bool a_host = !b_host && !out_opt && a.dim() == 0 && a.device().is_cpu() && b.is_cuda();
  if (!a_host && !b_host) check_same_device(a, b, name);
  rt = apply_op_rules(fam, op, name, rt);
  const DType out_t = fam == Family::compare ? DType::bool_ : rt;
  if (a_host || b_host) {
    const Tensor& t = a_host ? b : a;
    ScalarValue v{};
    scalar_operand((a_host ? a : b).item(), rt, v, name);
    Tensor cast, made;
    const Tensor& ct = t.dtype() == rt ? t : (cast = t.to(rt));
    const Tensor& out = out_opt ? *out_opt : (made = empty(t.sizes(), TensorOptions{out_t, t.device(), false}));
    if (out_opt && out.sizes() != t.sizes())
      throw ValueError(std::string(name) + ": output shape " + shape_str(out.sizes()) +
                       " does not match broadcast shape " + shape_str(t.sizes()));
    launch_scalar(ct, v, fam, op, name, a_host, rt, out, out_opt != nullptr);
    return out;
  }
  Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  Tensor out = out_opt ? *out_opt : empty(shape, TensorOptions{out_t, a.device(), false});
  if (out_opt && out.sizes() != shape)
    throw ValueError(std::string(name) + ": output shape " + shape_str(out.sizes()) +
                     " does not match broadcast shape " + shape_str(shape));
  Tensor ca = a.dtype() == rt ? a : a.to(rt);
  Tensor cb = b.dtype() == rt ? b : b.to(rt);
  Tensor ea = ca.expand(shape), eb = cb.expand(shape);
  BinaryArgs args{};
  args.out = out.data_ptr();
  args.a = ea.data_ptr();
  args.b = eb.data_ptr();
  args.n = out.numel();
  args.op = op;
  args.contiguous = ca.sizes() == shape && cb.sizes() == shape && out.is_contiguous() &&
                    ca.is_contiguous() && cb.is_contiguous();
  args.calc = make_calc<3>(shape, {&out.strides(), &ea.strides(), &eb.strides()});
  if (args.n == 0) return out;
  Device d = out.device();
  sanitize(name, d, {{&ea, "self"}, {&eb, "other"}}, {{&out, out_opt ? "out" : nullptr}});
  launch_binary(fam, d, args, code(rt), out, ea, &eb);
  return out;
}

Tensor binary(const Tensor& a0, const Tensor& b0, int op, const char* name, DType rt,
              Tensor* out_opt = nullptr) {
  return binary(a0, b0, Family::arith, op, name, rt, out_opt);
}

// A tensor and a Python-style scalar. The scalar is converted to the compute type of the
// promoted dtype and travels by value in the kernel's argument block (BinaryArgs::value), as
// torch passes a wrapped number: no host or device tensor, no copy, no synchronisation, so
// `x += 1` is one kernel launch and records as one kernel node under graph capture.

// Whether integer v is a value of integer dtype t, without wrapping.
bool fits(std::int64_t v, DType t) {
  switch (t) {
    case DType::uint8: return v >= 0 && v <= 255;
    case DType::int8: return v >= -128 && v <= 127;
    case DType::int16: return v >= -32768 && v <= 32767;
    case DType::int32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;
  }
}

// The promoted dtype of op(a, s), after the op's own rules (true division, rejected pairs).
DType scalar_op_type(const Tensor& a, const Scalar& s, Family fam, int op, const char* name) {
  if (!a.defined()) throw ValueError(std::string(name) + ": undefined tensor operand");
  DType rt = apply_op_rules(fam, op, name, result_type(a, s));
  if (fam == Family::compare && s.kind == Scalar::Kind::integer && is_integral(rt, false) && !fits(s.i, rt))
    rt = DType::int64;  // u8 < 256, u8 > -19: compared exactly (torch wraps the number instead)
  return rt;
}

// Launches op(ca, v) (op(v, ca) when `reverse`) into `out`; ca is in dtype rt, out has ca's
// shape. Takes references only: the in-place hot path copies no Tensor.
void launch_scalar(const Tensor& ca, const ScalarValue& v, Family fam, int op, const char* name, bool reverse,
                   DType rt, const Tensor& out, bool out_is_self) {
  BinaryArgs args{};
  args.op = op;
  args.scalar = reverse ? kScalarSelf : kScalarOther;
  args.value = v;
  args.out = out.data_ptr();
  args.a = ca.data_ptr();
  args.b = nullptr;
  args.n = out.numel();
  args.contiguous = out.is_contiguous() && ca.is_contiguous();
  // Offsets for (out, a); the third set repeats a's (unused: the scalar has no memory).
  args.calc = make_calc<3>(ca.sizes(), {&out.strides(), &ca.strides(), &ca.strides()});
  if (args.n == 0) return;
  const Device d = ca.device();
  sanitize(name, d, {{&ca, "self"}}, {{&out, out_is_self ? "self" : nullptr}});
  launch_binary(fam, d, args, code(rt), out, ca, nullptr);
}

// `reverse`: op(s, a) instead of op(a, s).
Tensor binary_scalar(const Tensor& a, const Scalar& s, Family fam, int op, const char* name, bool reverse) {
  const DType rt = scalar_op_type(a, s, fam, op, name);
  ScalarValue v{};
  scalar_operand(s, rt, v, name);  // before anything is allocated: an overflow throws
  // The tensor operand in the promoted dtype: a cast only when the scalar raised the
  // category (int tensor + 2.5 -> float32), as torch's computation in the common dtype.
  Tensor cast;
  const Tensor& ca = a.dtype() == rt ? a : (cast = a.to(rt));
  Tensor out = empty(a.sizes(), TensorOptions{fam == Family::compare ? DType::bool_ : rt, a.device(), false});
  launch_scalar(ca, v, fam, op, name, reverse, rt, out, false);
  return out;
}

Tensor binary_scalar(const Tensor& a, const Scalar& s, int op, const char* name, bool reverse) {
  return binary_scalar(a, s, Family::arith, op, name, reverse);
}

Tensor compare(const Tensor& a, const Tensor& b, int op, const char* name) {
  return binary(a, b, Family::compare, op, name, result_type(a, b));
}
Tensor compare(const Tensor& a, const Scalar& b, int op, const char* name) {
  return binary_scalar(a, b, Family::compare, op, name, false);
}

Tensor unary(const Tensor& a, int op) {
  if (op == kRelu && (is_complex(a.dtype()) || a.dtype() == DType::bool_))
    throw ValueError(std::string("relu is not defined for dtype ") + dtype_name(a.dtype()));
  if (op == kNeg && a.dtype() == DType::bool_)
    throw ValueError("negation, the `-` operator, on a bool tensor is not supported; use logical_not");
  Tensor out = empty(a.sizes(), TensorOptions{a.dtype(), a.device(), false});
  UnaryArgs args{};
  args.out = out.data_ptr();
  args.a = a.data_ptr();
  args.n = a.numel();
  args.op = op;
  args.contiguous = a.is_contiguous();
  args.calc = make_calc<2>(a.sizes(), {&out.strides(), &a.strides()});
  if (args.n == 0) return out;
  Device d = a.device();
  sanitize(op == kNeg ? "neg" : op == kRelu ? "relu" : "unary", d, {{&a, "self"}}, {{&out, nullptr}});
  DType t = a.dtype();
  if (exec_for(d) == Exec::cuda) cuda_unary(d.index, stream_for(d), args, code(t));
  else run_cpu(d, {out.storage(), a.storage()}, [args, t] { cpu_unary(args, code(t)); }, "ck_unary");
  return out;
}

Tensor& inplace(Tensor& a, const Tensor& b, int op, const char* name) {
  DType rt = result_type(a, b);
  if (op == kDiv && is_integral(rt, true)) rt = DType::float32;
  if (category(rt) > category(a.dtype()))
    throw ValueError(std::string(name) + ": result type " + dtype_name(rt) +
                     " can't be cast to the desired output type " + dtype_name(a.dtype()));
  if (rt == a.dtype() && a.is_non_overlapping_and_dense()) {
    binary(a, b, op, name, rt, &a);
  } else {
    a.copy_(binary(a, b, op, name, rt));
  }
  return a;
}

// In-place with a scalar operand: the result dtype is a's, so the kernel writes into a
// directly (torch: `x.add_(1)` is one kernel with the number as its argument).
Tensor& inplace(Tensor& a, const Scalar& s, int op, const char* name) {
  const DType rt = scalar_op_type(a, s, Family::arith, op, name);
  if (category(rt) > category(a.dtype()))
    throw ValueError(std::string(name) + ": result type " + dtype_name(rt) +
                     " can't be cast to the desired output type " + dtype_name(a.dtype()) +
                     " (as torch); use the out-of-place op or convert the tensor with .to()");
  // A wrapped number never widens within a category, so rt == a.dtype() here.
  if (!a.is_non_overlapping_and_dense()) return a.copy_(binary_scalar(a, s, Family::arith, op, name, false));
  ScalarValue v{};
  scalar_operand(s, rt, v, name);
  launch_scalar(a, v, Family::arith, op, name, false, rt, a, true);
  return a;
}

std::atomic<bool> g_allow_tf32{false};
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  ResultType s;
  s.tensor(a);
  s.tensor(b);
  return s.result();
}
DType result_type(const Tensor& a, const Scalar& b) {
  ResultType s;
  s.tensor(a);
  s.scalar(b);
  return s.result();
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, kAdd, "add", result_type(a, b)); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, kSub, "sub", result_type(a, b)); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, kMul, "mul", result_type(a, b)); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, kDiv, "div", result_type(a, b)); }
Tensor add(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kAdd, "add", false); }
Tensor sub(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kSub, "sub", false); }
Tensor mul(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kMul, "mul", false); }
Tensor div(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kDiv, "div", false); }
Tensor rsub(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kSub, "sub", true); }
Tensor rdiv(const Tensor& a, const Scalar& b) { return binary_scalar(a, b, kDiv, "div", true); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare(a, b, kEq, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(a, b, kNe, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(a, b, kLt, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(a, b, kLe, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(a, b, kGt, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(a, b, kGe, "ge"); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare(a, b, kEq, "eq"); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare(a, b, kNe, "ne"); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare(a, b, kLt, "lt"); }
Tensor le(const Tensor& a, const Scalar& b) { return compare(a, b, kLe, "le"); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare(a, b, kGt, "gt"); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare(a, b, kGe, "ge"); }

Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(a, b, Family::pow, 0, "pow", result_type(a, b));
}
Tensor pow(const Tensor& a, const Scalar& exponent) {
  if (is_integral(result_type(a, exponent), true) && exponent.kind == Scalar::Kind::integer && exponent.i < 0)
    throw ValueError("pow: Integers to negative integer powers are not allowed (exponent " +
                     std::to_string(exponent.i) + " on a " + dtype_name(a.dtype()) +
                     " tensor); use a float exponent or cast the tensor to a float dtype");
  return binary_scalar(a, exponent, Family::pow, 0, "pow", false);
}
Tensor pow(const Scalar& base, const Tensor& exponent) {
  return binary_scalar(exponent, base, Family::pow, 0, "pow", true);
}

Tensor neg(const Tensor& a) { return unary(a, kNeg); }
Tensor relu(const Tensor& a) { return unary(a, kRelu); }
Tensor& add_(Tensor& a, const Tensor& b) { return inplace(a, b, kAdd, "add_"); }
Tensor& sub_(Tensor& a, const Tensor& b) { return inplace(a, b, kSub, "sub_"); }
Tensor& mul_(Tensor& a, const Tensor& b) { return inplace(a, b, kMul, "mul_"); }
Tensor& div_(Tensor& a, const Tensor& b) { return inplace(a, b, kDiv, "div_"); }
Tensor& add_(Tensor& a, const Scalar& b) { return inplace(a, b, kAdd, "add_"); }
Tensor& sub_(Tensor& a, const Scalar& b) { return inplace(a, b, kSub, "sub_"); }
Tensor& mul_(Tensor& a, const Scalar& b) { return inplace(a, b, kMul, "mul_"); }
Tensor& div_(Tensor& a, const Scalar& b) { return inplace(a, b, kDiv, "div_"); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }

Tensor sum(const Tensor& a) {
  if (!a.defined()) throw ValueError("sum: undefined tensor");
  DType ot = is_integral(a.dtype(), true) ? DType::int64 : a.dtype();
  Tensor out = empty({}, TensorOptions{ot, a.device(), false});
  OffsetCalc<1> calc = make_calc<1>(a.sizes(), {&a.strides()});
  std::int64_t n = a.numel();
  const void* in = a.data_ptr();
  void* o = out.data_ptr();
  Device d = a.device();
  DType it = a.dtype();
  sanitize("sum", d, {{&a, "self"}}, {{&out, nullptr}});
  if (exec_for(d) == Exec::cuda) cuda_sum(d.index, stream_for(d), in, calc, n, code(it), o, code(ot));
  else run_cpu(d, {out.storage(), a.storage()}, [=] { cpu_sum(in, calc, n, code(it), o, code(ot)); },
                 "ck_sum");
  return out;
}

void set_matmul_allow_tf32(bool allow) noexcept { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool matmul_allow_tf32() noexcept { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace cudakit
