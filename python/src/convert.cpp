// Conversions from Python objects to dtypes, devices and shapes; the dtype and Device classes.
#include "bindings.hpp"

namespace eventide::python {

using namespace pybind11::literals;

const char* py_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
  }
  return "?";
}

DType to_dtype(const py::handle& obj, DType fallback) {
  if (obj.is_none()) return fallback;
  if (py::isinstance<DType>(obj)) return obj.cast<DType>();
  if (py::isinstance<py::str>(obj)) return parse_dtype(obj.cast<std::string>());
  std::string text = py::str(obj).cast<std::string>();
  if (text.rfind("torch.", 0) == 0) return parse_dtype(text.substr(6));
  try {
    py::object np_dtype = py::module_::import("numpy").attr("dtype")(obj);
    return parse_dtype(np_dtype.attr("name").cast<std::string>());
  } catch (const py::error_already_set&) {
    throw InvalidArgument("not a dtype: " + py::repr(obj).cast<std::string>());
  }
}

std::optional<Device> to_device(const py::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  if (py::isinstance<Device>(obj)) return obj.cast<Device>();
  if (py::isinstance<py::str>(obj)) return Device(obj.cast<std::string>());
  // torch.device and similar: their str() is the spelling ("cuda:0", "cpu").
  if (py::hasattr(obj, "type")) return Device(py::str(obj).cast<std::string>());
  throw InvalidArgument("not a device: " + py::repr(obj).cast<std::string>());
}

Device device_or_default(const py::handle& obj) {
  auto d = to_device(obj);
  return d ? *d : default_device();
}

Shape to_shape(const py::tuple& args, const char* fn) {
  Shape shape;
  auto add = [&](const py::handle& h) {
    if (!PyIndex_Check(h.ptr())) {
      throw InvalidArgument(std::string(fn) + ": shape entries must be ints, got " +
                            py::repr(h).cast<std::string>());
    }
    int overflow = 0;
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
    if (!index) throw py::error_already_set();  // its __index__ raised
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) {
      throw InvalidArgument(std::string(fn) + ": the shape entry " + py::repr(h).cast<std::string>() +
                            " does not fit in 64 bits");
    }
    shape.push_back(v);
  };
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) {
    if (!py::isinstance<py::sequence>(args[0])) {
      throw InvalidArgument(std::string(fn) + ": the shape must be ints or one sequence of ints");
    }
    for (py::handle h : args[0]) add(h);
  } else {
    for (py::handle h : args) add(h);
  }
  return shape;
}

py::tuple to_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}


void bind_types(py::module_& m) {
  // --- dtype ---
  py::class_<DType>(m, "dtype", "Element types of tensors: eventide.float32, ...")
      .def(py::init([](const py::object& spec) { return to_dtype(spec); }), "spec"_a)
      .def("__repr__", [](DType d) { return std::string("eventide.") + py_name(d); })
      .def("__str__", [](DType d) { return std::string("eventide.") + py_name(d); })
      .def("__eq__", [](DType a, const py::object& b) {
        try {
          return !b.is_none() && to_dtype(b) == a;
        } catch (const Error&) {
          return false;
        }
      })
      .def("__hash__", [](DType d) { return static_cast<int>(d); })
      .def_property_readonly("name", [](DType d) { return py_name(d); },
                             "NumPy's and PyTorch's name: 'float32', 'bfloat16', ...")
      .def_property_readonly("itemsize", [](DType d) { return itemsize(d); },
                             "The size of one element, in bytes.")
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); },
                             "True for float32, float64, float16 and bfloat16.");
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::f16, DType::bf16}) {
    m.attr(py_name(d)) = py::cast(d);
  }

  // --- Device ---
  py::class_<Device>(m, "Device", "A device: 'cpu' or 'cuda:N'.")
      .def(py::init([](const py::object& spec) { return device_or_default(spec); }), "spec"_a)
      .def_property_readonly("type", [](Device d) { return std::string(d.kind_name()); },
                             "The kind of device: 'cpu' or 'cuda'.")
      .def_property_readonly("index", [](Device d) { return d.index(); },
                             "The device's number among those of its kind (0 for the cpu).")
      .def("__str__", &Device::str)
      .def("__repr__", [](Device d) { return "eventide.Device('" + d.str() + "')"; })
      .def("__eq__", [](Device a, const py::object& b) {
        try {
          auto d = to_device(b);
          return d && *d == a;
        } catch (const Error&) {
          return false;
        }
      })
      .def("__hash__", [](Device d) { return std::hash<Device>{}(d); });
  py::implicitly_convertible<py::str, Device>();

}

}  // namespace eventide::python
