// RNG bindings: Generator, the 9 torch.cuda seeding names (wrapped with torch's argument
// handling in cudakit/random.py), rand/randn/randint.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cudakit/error.hpp"
#include "cudakit/random.hpp"
#include "registry.hpp"
#include "tensor_common.hpp"

namespace cudakit::python {
namespace {

// torch accepts any Python int as a seed, wrapping negatives modulo 2**64.
std::uint64_t to_seed(py::handle o) {
  if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o))
    throw ValueError("seed must be an int, got " + py::str(o.get_type().attr("__name__")).cast<std::string>());
  py::int_ v = py::reinterpret_borrow<py::int_>(o);
  py::int_ two64 = py::reinterpret_steal<py::int_>(PyLong_FromUnsignedLongLong(0));
  py::object r = v;
  if (py::int_(0).attr("__gt__")(v).cast<bool>()) r = v.attr("__add__")(py::int_(1).attr("__lshift__")(64));
  if (r.attr("__ge__")(py::int_(1).attr("__lshift__")(64)).cast<bool>() || r.attr("__lt__")(py::int_(0)).cast<bool>())
    throw ValueError("seed must be in [-2**63, 2**64), got " + py::str(o).cast<std::string>());
  (void)two64;
  return r.cast<std::uint64_t>();
}

int dev_index(py::handle o) {
  Device d = parse_device(o);
  if (d.is_cpu()) throw ValueError("expected a cuda device, got 'cpu'");
  return d.index;
}

void bind(py::module_& m) {
  py::class_<Generator>(m, "Generator", R"doc(
A Philox4x32-10 generator for one device (torch.Generator-like): manual_seed, seed,
initial_seed, get_state/set_state (16-byte uint8 tensor: seed, offset). Pass it as
generator= to rand/randn/randint/uniform_/normal_.)doc")
      .def(py::init([](py::object device) { return new Generator(parse_device(device)); }),
           py::arg("device") = py::none())
      .def_property_readonly("device", [](const Generator& g) { return g.device().str(); })
      .def("manual_seed", [](Generator& g, py::handle s) -> Generator& { g.manual_seed(to_seed(s)); return g; },
           py::return_value_policy::reference)
      .def("seed", &Generator::seed)
      .def("initial_seed", &Generator::initial_seed)
      .def("get_state", &Generator::get_state)
      .def("set_state", [](Generator& g, const Tensor& t) -> Generator& { g.set_state(t); return g; },
           py::return_value_policy::reference)
      .def("get_offset", &Generator::offset)
      .def("set_offset", &Generator::set_offset)
      .def("capture_prologue", &Generator::capture_prologue)
      .def("capture_epilogue", &Generator::capture_epilogue)
      .def("replay_prologue", [](Generator& g, std::uint64_t blocks, py::object stream) {
        g.replay_prologue(blocks, stream.is_none() ? current_stream(g.device().index)
                                                   : stream_from_object(stream, g.device().index));
      }, py::arg("graph_blocks"), py::arg("stream") = py::none());

  m.def("_default_generator", [](py::object device) -> Generator& { return default_generator(dev_index(device)); },
        py::arg("device") = py::none(), py::return_value_policy::reference);
  m.def("_manual_seed", [](py::handle s) { manual_seed(to_seed(s)); });
  m.def("_manual_seed_all", [](py::handle s) { manual_seed_all(to_seed(s)); });
  m.def("_seed", []() { return seed(); });
  m.def("_seed_all", []() { seed_all(); });
  m.def("_initial_seed", []() { return initial_seed(); });
  m.def("_get_rng_state", [](py::object device) { return get_rng_state(dev_index(device)); }, py::arg("device") = py::none());
  m.def("_get_rng_state_all", []() { return get_rng_state_all(); });
  m.def("_set_rng_state", [](const Tensor& t, py::object device) { set_rng_state(t, dev_index(device)); },
        py::arg("new_state"), py::arg("device") = py::none());
  m.def("_set_rng_state_all", [](const std::vector<Tensor>& s) { set_rng_state_all(s); });

  auto opts = [](py::object dtype, py::object device, DType def) {
    return TensorOptions{dtype.is_none() ? def : parse_dtype(dtype), parse_device(device), false};
  };
  m.def("rand", [opts](py::args s, py::object dtype, py::object device, py::object gen) {
          Generator* g = gen.is_none() ? nullptr : gen.cast<Generator*>();
          return rand(parse_shape(s), opts(dtype, device, DType::float32), g);
        }, py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
  m.def("randn", [opts](py::args s, py::object dtype, py::object device, py::object gen) {
          Generator* g = gen.is_none() ? nullptr : gen.cast<Generator*>();
          return randn(parse_shape(s), opts(dtype, device, DType::float32), g);
        }, py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
  m.def("randint", [opts](py::args args, py::object dtype, py::object device, py::object gen) {
          Generator* g = gen.is_none() ? nullptr : gen.cast<Generator*>();
          // randint(high, size) or randint(low, high, size), as torch.
          std::int64_t low = 0, high;
          py::object size;
          if (args.size() == 2) { high = args[0].cast<std::int64_t>(); size = args[1]; }
          else if (args.size() == 3) { low = args[0].cast<std::int64_t>(); high = args[1].cast<std::int64_t>(); size = args[2]; }
          else throw ValueError("randint expects (high, size) or (low, high, size)");
          Shape shape = py::isinstance<py::int_>(size) ? Shape{size.cast<std::int64_t>()} : size.cast<Shape>();
          return randint(low, high, shape, opts(dtype, device, DType::int64), g);
        }, py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
}

}  // namespace

static Registrar reg("random", 41, &bind);

}  // namespace cudakit::python
