// cudakit.jiterator: torch.cuda.jiterator's callables (_create_jit_fn,
// _create_multi_output_jit_fn; python/cudakit/jiterator.py) over cudakit::jiterator.
//
// Arguments: positional tensors are cudakit Tensors or any array with __dlpack__ or
// __cuda_array_interface__ (torch, CuPy, JAX, Numba), viewed zero-copy on the current stream;
// keyword arguments are the scalar parameters declared at creation (numbers or one-element
// tensors, as torch). The GIL is released while the kernel is compiled and launched.
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/error.hpp"
#include "cudakit/jiterator.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {
namespace jt = cudakit::jiterator;

// A scalar parameter value: a number, or a one-element tensor (torch takes its item()).
Scalar param_value(py::handle v, Arg a) {
  if (auto s = as_scalar(v, a)) return *s;
  if (py::isinstance<Tensor>(v)) {
    const Tensor& t = v.cast<const Tensor&>();
    if (t.numel() == 1) return t.item();
  }
  throw_type(a, "a number (bool, int, float or complex) or a one-element tensor", v);
}

std::vector<jt::Param> params_of(const py::kwargs& kwargs, const char* fn) {
  std::vector<jt::Param> out;
  for (auto [k, v] : kwargs) {
    std::string name = py::str(k);
    Scalar value = param_value(v, Arg{fn, name.c_str()});
    out.push_back(jt::Param{std::move(name), value});
  }
  return out;
}

Tensor input_arg(py::handle v, std::size_t index, const std::string& fn) {
  const std::string name = "tensors[" + std::to_string(index) + "]";
  const Arg a{fn.c_str(), name.c_str()};
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
  if (py::hasattr(v, "__dlpack__")) return from_dlpack_obj(v);
  if (py::hasattr(v, "__cuda_array_interface__")) return from_cuda_array_interface(v, a);
  throw_type(a,
             "a tensor or array (cudakit.Tensor, or an object with __dlpack__ or "
             "__cuda_array_interface__); scalars are keyword arguments declared when the "
             "function is created",
             v);
}

py::object call(const jt::JitFunction& f, const py::args& args, const py::kwargs& kwargs) {
  const std::string fn = f.name();
  std::vector<Tensor> inputs;
  inputs.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) inputs.push_back(input_arg(args[i], i, fn));
  std::vector<jt::Param> overrides;
  for (auto [k, v] : kwargs) {
    std::string name = py::str(k);
    bool declared = false;
    for (const auto& p : f.params()) declared = declared || p.name == name;
    if (!declared) {
      std::string known;
      for (const auto& p : f.params()) known += (known.empty() ? "" : ", ") + p.name;
      // KeyError, as torch's jiterator.
      throw py::key_error(name + " is not declared in function definition (declared: " +
                          (known.empty() ? "none" : known) + ")");
    }
    Scalar value = param_value(v, Arg{fn.c_str(), name.c_str()});
    overrides.push_back(jt::Param{std::move(name), value});
  }
  std::vector<Tensor> outs;
  {
    py::gil_scoped_release nogil;
    outs = f.run(inputs, overrides);
  }
  if (outs.size() == 1) return py::cast(outs[0]);
  py::tuple t(outs.size());
  for (std::size_t i = 0; i < outs.size(); ++i) t[i] = py::cast(outs[i]);
  return std::move(t);
}

void bind(py::module_& m) {
  py::class_<jt::JitFunction>(m, "_JitFunction", R"doc(
A function compiled at run time from a C++ function template and applied elementwise
(torch.cuda.jiterator). Create it with cudakit.jiterator._create_jit_fn or
_create_multi_output_jit_fn; call it with tensors (broadcast, type-promoted) and the scalar
parameters declared at creation as keyword arguments.)doc")
      .def(py::init([](py::handle code, py::handle num_outputs, py::handle return_by_ref, py::kwargs kwargs) {
             const char* fn = "_create_jit_fn";
             if (!PyUnicode_Check(code.ptr())) throw_type(Arg{fn, "code_string"}, "a str", code);
             const int n = to_int(num_outputs, Arg{"_create_multi_output_jit_fn", "num_outputs"});
             const bool by_ref = to_bool(return_by_ref, Arg{fn, "return_by_ref"});
             return jt::JitFunction(code.cast<std::string>(), params_of(kwargs, fn), n, by_ref);
           }),
           py::arg("code_string"), py::arg("num_outputs"), py::arg("return_by_ref"))
      .def("__call__", &call)
      .def_property_readonly("kernel_name", &jt::JitFunction::name)
      .def_property_readonly("code_string", &jt::JitFunction::code)
      .def_property_readonly("num_outputs", &jt::JitFunction::num_outputs)
      .def_property_readonly("return_by_ref", &jt::JitFunction::return_by_ref)
      .def_property_readonly("kwargs_dict", [](const jt::JitFunction& f) {
        py::dict d;
        for (const auto& p : f.params()) {
          const Scalar& s = p.value;
          switch (s.kind) {
            case Scalar::Kind::boolean: d[p.name.c_str()] = py::bool_(s.i != 0); break;
            case Scalar::Kind::integer: d[p.name.c_str()] = py::int_(s.i); break;
            case Scalar::Kind::floating: d[p.name.c_str()] = py::float_(s.d); break;
            case Scalar::Kind::complex:
              d[p.name.c_str()] = py::reinterpret_steal<py::object>(PyComplex_FromDoubles(s.c.real(), s.c.imag()));
              break;
          }
        }
        return d;
      })
      .def_property_readonly("num_kernels", &jt::JitFunction::num_kernels);

  m.def("_jiterator_cache_dir", [] {
    std::string d = jt::cache_dir();
    return d.empty() ? py::object(py::none()) : py::object(py::str(d));
  });
  m.def("_jiterator_cache_stats", [] {
    const jt::CacheStats s = jt::cache_stats();
    py::dict d;
    d["memory_hits"] = s.memory_hits;
    d["disk_hits"] = s.disk_hits;
    d["compiles"] = s.compiles;
    d["disk_writes"] = s.disk_writes;
    d["disk_rejected"] = s.disk_rejected;
    d["compile_ms"] = s.compile_ms;
    return d;
  });
}

Registrar reg("jiterator", order::jiterator, bind);

}  // namespace
}  // namespace cudakit::python
