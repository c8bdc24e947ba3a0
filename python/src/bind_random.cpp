// RNG bindings: Generator, the 9 torch.cuda seeding names (wrapped with torch's argument
// handling in cudakit/random.py), rand/randn/randint.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "args.hpp"
#include "cudakit/error.hpp"
#include "cudakit/random.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// torch accepts any Python int as a seed, wrapping negatives modulo 2**64.
std::uint64_t to_seed(py::handle o, const char* fn) {
  const Arg a{fn, "seed"};
  if (!is_int(o)) throw_type(a, "an int", o);
  py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(o.ptr()));
  const py::int_ two64 = py::int_(1).attr("__lshift__")(64);
  py::object r = v;
  if (py::int_(0).attr("__gt__")(v).cast<bool>()) r = v.attr("__add__")(two64);
  if (r.attr("__ge__")(two64).cast<bool>() || r.attr("__lt__")(py::int_(0)).cast<bool>())
    throw_value(a, "must be in [-2**63, 2**64), got " + py::str(o).cast<std::string>());
  return r.cast<std::uint64_t>();
}

int dev_index(py::handle o, const char* fn) { return cuda_index(o, Arg{fn, "device"}); }

Generator* generator_arg(py::handle g, const char* fn) {
  if (g.is_none()) return nullptr;
  if (!py::isinstance<Generator>(g)) throw_type(Arg{fn, "generator"}, "a cudakit.Generator or None", g);
  return g.cast<Generator*>();
}

const Tensor& state_arg(py::handle t, const char* fn) { return tensor_arg(t, Arg{fn, "new_state"}); }

TensorOptions opts(const char* fn, py::handle dtype, py::handle device, DType def) {
  return TensorOptions{dtype.is_none() ? def : dtype_arg(dtype, Arg{fn, "dtype"}), device_arg(device, Arg{fn, "device"}),
                       false};  // braced: evaluated left to right
}

void bind(py::module_& m) {
  py::class_<Generator>(m, "Generator", R"doc(
A Philox4x32-10 generator for one device (torch.Generator-like): manual_seed, seed,
initial_seed, get_state/set_state (16-byte uint8 tensor: seed, offset). Pass it as
generator= to rand/randn/randint/uniform_/normal_.)doc")
      .def(py::init([](py::handle device) { return new Generator(device_arg(device, Arg{"Generator", "device"})); }),
           py::arg("device") = py::none())
      .def_property_readonly("device", [](const Generator& g) { return g.device(); })
      .def("manual_seed", [](Generator& g, py::handle s) -> Generator& {
        g.manual_seed(to_seed(s, "Generator.manual_seed"));
        return g;
      }, py::arg("seed"), py::return_value_policy::reference)
      .def("seed", &Generator::seed)
      .def("initial_seed", &Generator::initial_seed)
      .def("get_state", &Generator::get_state)
      .def("set_state", [](Generator& g, py::handle t) -> Generator& {
        g.set_state(state_arg(t, "Generator.set_state"));
        return g;
      }, py::arg("new_state"), py::return_value_policy::reference)
      .def("get_offset", &Generator::offset)
      .def("set_offset", [](Generator& g, py::handle o) { g.set_offset(to_uint64(o, Arg{"Generator.set_offset", "offset"})); },
           py::arg("offset"))
      .def("capture_prologue", &Generator::capture_prologue)
      .def("capture_epilogue", &Generator::capture_epilogue)
      .def("replay_prologue", [](Generator& g, py::handle blocks, py::handle stream) {
        const int d = g.device().index;
        const std::uint64_t n = to_uint64(blocks, Arg{"Generator.replay_prologue", "graph_blocks"});
        g.replay_prologue(n, stream_arg(stream, Arg{"Generator.replay_prologue", "stream"}, d));
      }, py::arg("graph_blocks"), py::arg("stream") = py::none());

  m.def("_default_generator",
        [](py::handle device) -> Generator& { return default_generator(dev_index(device, "default_generator")); },
        py::arg("device") = py::none(), py::return_value_policy::reference);
  m.def("_manual_seed", [](py::handle s) { manual_seed(to_seed(s, "manual_seed")); });
  m.def("_manual_seed_all", [](py::handle s) { manual_seed_all(to_seed(s, "manual_seed_all")); });
  m.def("_seed", []() { return seed(); });
  m.def("_seed_all", []() { seed_all(); });
  m.def("_initial_seed", []() { return initial_seed(); });
  m.def("_get_rng_state", [](py::handle device) { return get_rng_state(dev_index(device, "get_rng_state")); },
        py::arg("device") = py::none());
  m.def("_get_rng_state_all", []() { return get_rng_state_all(); });
  m.def("_set_rng_state", [](py::handle t, py::handle device) {
    set_rng_state(state_arg(t, "set_rng_state"), dev_index(device, "set_rng_state"));
  }, py::arg("new_state"), py::arg("device") = py::none());
  m.def("_set_rng_state_all", [](py::handle states) {
    const Arg a{"set_rng_state_all", "new_states"};
    if (!PySequence_Check(states.ptr())) throw_type(a, "a sequence of state tensors", states);
    std::vector<Tensor> v;
    for (py::handle t : py::reinterpret_borrow<py::sequence>(states)) v.push_back(tensor_arg(t, a));
    set_rng_state_all(v);
  });

  m.def("rand", [](py::args s, py::handle dtype, py::handle device, py::handle gen) {
          const Shape shape = shape_from_args(s, Arg{"rand", "size"});
          const TensorOptions o = opts("rand", dtype, device, DType::float32);
          return rand(shape, o, generator_arg(gen, "rand"));
        }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
  m.def("randn", [](py::args s, py::handle dtype, py::handle device, py::handle gen) {
          const Shape shape = shape_from_args(s, Arg{"randn", "size"});
          const TensorOptions o = opts("randn", dtype, device, DType::float32);
          return randn(shape, o, generator_arg(gen, "randn"));
        }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
  m.def("randint", [](py::args args, py::handle dtype, py::handle device, py::handle gen) {
          // randint(high, size) or randint(low, high, size), as torch.
          std::int64_t low = 0, high;
          py::handle size;
          if (args.size() == 2) {
            high = to_int64(args[0], Arg{"randint", "high"});
            size = args[1];
          } else if (args.size() == 3) {
            low = to_int64(args[0], Arg{"randint", "low"});
            high = to_int64(args[1], Arg{"randint", "high"});
            size = args[2];
          } else {
            throw ArgTypeError("randint() takes (high, size) or (low, high, size), got " +
                               std::to_string(args.size()) + " positional arguments");
          }
          const Shape shape = shape_arg(size, Arg{"randint", "size"});
          const TensorOptions o = opts("randint", dtype, device, DType::int64);
          return randint(low, high, shape, o, generator_arg(gen, "randint"));
        }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("generator") = py::none());
}

}  // namespace

static Registrar reg("random", order::random, &bind);

}  // namespace cudakit::python
