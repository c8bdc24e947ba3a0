// TunableOp bindings (cudakit.tunable, python/cudakit/tunable.py): settings, results files and
// offline tuning. Private entry points (_tunable_*) convert every argument in the argument
// layer, so a wrong value reads the same as in the rest of cudakit. TunableOp's warnings
// become Python UserWarnings on threads that hold the GIL (stderr elsewhere, and at exit).
#include <pybind11/pybind11.h>

#include <cstdio>

#include "args.hpp"
#include "cudakit/tunable.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace tn = cudakit::tunable;

void warn_from_tunable(const std::string& msg) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 2) != 0) throw py::error_already_set();
    return;
  }
  std::fprintf(stderr, "cudakit: TunableOp warning: %s\n", msg.c_str());
}

std::string path_or_empty(py::handle v, Arg a) { return v.is_none() ? std::string() : to_string(v, a); }

void bind(py::module_& m) {
  tn::set_warning_handler(&warn_from_tunable);

  m.def("_tunable_enable", [](py::handle v) { tn::enable(to_bool(v, Arg{"enable", "val"})); });
  m.def("_tunable_is_enabled", &tn::is_enabled);
  m.def("_tunable_tuning_enable",
        [](py::handle v) { tn::tuning_enable(to_bool(v, Arg{"tuning_enable", "val"})); });
  m.def("_tunable_tuning_is_enabled", &tn::tuning_is_enabled);
  m.def("_tunable_record_untuned_enable", [](py::handle v) {
    tn::record_untuned_enable(to_bool(v, Arg{"record_untuned_enable", "val"}));
  });
  m.def("_tunable_record_untuned_is_enabled", &tn::record_untuned_is_enabled);

  m.def("_tunable_set_max_tuning_duration", [](py::handle v) {
    tn::set_max_tuning_duration(to_int(v, Arg{"set_max_tuning_duration", "duration"}));
  });
  m.def("_tunable_get_max_tuning_duration", &tn::get_max_tuning_duration);
  m.def("_tunable_set_max_tuning_iterations", [](py::handle v) {
    tn::set_max_tuning_iterations(to_int(v, Arg{"set_max_tuning_iterations", "iterations"}));
  });
  m.def("_tunable_get_max_tuning_iterations", &tn::get_max_tuning_iterations);
  m.def("_tunable_set_max_warmup_duration", [](py::handle v) {
    tn::set_max_warmup_duration(to_int(v, Arg{"set_max_warmup_duration", "duration"}));
  });
  m.def("_tunable_get_max_warmup_duration", &tn::get_max_warmup_duration);
  m.def("_tunable_set_max_warmup_iterations", [](py::handle v) {
    tn::set_max_warmup_iterations(to_int(v, Arg{"set_max_warmup_iterations", "iterations"}));
  });
  m.def("_tunable_get_max_warmup_iterations", &tn::get_max_warmup_iterations);

  m.def("_tunable_set_filename", [](py::handle name, py::handle insert) {
    tn::set_filename(to_string(name, Arg{"set_filename", "filename"}),
                     to_bool(insert, Arg{"set_filename", "insert_device_ordinal"}));
  });
  m.def("_tunable_get_filename", &tn::get_filename);
  m.def("_tunable_get_results", [] {
    py::list out;
    for (const tn::Result& r : tn::get_results()) {
      out.append(py::make_tuple(r.op_signature, r.params_signature, r.solution, r.time_ms));
    }
    return py::tuple(out);
  });
  m.def("_tunable_get_validators", [] {
    py::list out;
    for (const auto& [key, value] : tn::get_validators()) out.append(py::make_tuple(key, value));
    return py::tuple(out);
  });
  m.def("_tunable_read_file",
        [](py::handle name) { return tn::read_file(path_or_empty(name, Arg{"read_file", "filename"})); });
  m.def("_tunable_write_file", [](py::handle name) {
    return tn::write_file(path_or_empty(name, Arg{"write_file", "filename"}));
  });
  m.def("_tunable_write_file_for_torch", [](py::handle name, py::handle version) {
    return tn::write_file_for_torch(to_string(name, Arg{"write_file", "filename"}),
                                    to_string(version, Arg{"write_file", "torch_version"}));
  });
  m.def("_tunable_write_file_on_exit", [](py::handle v) {
    tn::write_file_on_exit(to_bool(v, Arg{"write_file_on_exit", "val"}));
  });

  m.def("_tunable_set_rotating_buffer_size", [](py::handle v) {
    tn::set_rotating_buffer_size(to_int(v, Arg{"set_rotating_buffer_size", "buffer_size"}));
  });
  m.def("_tunable_get_rotating_buffer_size", &tn::get_rotating_buffer_size);
  m.def("_tunable_set_numerical_check_tolerances", [](py::handle enable, py::handle atol,
                                                      py::handle rtol) {
    const char* fn = "set_numerical_check_tolerances";
    tn::set_numerical_check_tolerances(to_bool(enable, Arg{fn, "enable"}),
                                       to_double(atol, Arg{fn, "atol"}),
                                       to_double(rtol, Arg{fn, "rtol"}));
  });
  m.def("_tunable_numerical_check", [] {
    const tn::NumericalCheck c = tn::numerical_check();
    return py::make_tuple(c.enabled, c.atol, c.rtol);
  });

  m.def("_tunable_tune_gemm_in_file", [](py::handle name) {
    tn::tune_gemm_in_file(to_string(name, Arg{"tune_gemm_in_file", "filename"}));
  });
  m.def("_tunable_tune_gemm_line",
        [](py::handle line) { return tn::tune_gemm_line(to_string(line, Arg{"tune_gemm_line", "line"})); });
}

Registrar reg("tunable", order::tunable, bind);

}  // namespace
}  // namespace cudakit::python
