// Tensors: the class, creation, the ops, and ev.tensor(data).
#include <cmath>
#include <limits>
#include <vector>

#include "bindings.hpp"
#include "eventide/half.hpp"

namespace eventide::python {

using namespace pybind11::literals;
using std::chrono::nanoseconds;

namespace {

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
using BinaryOutFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&);

bool is_scalar(const py::handle& obj) {
  if (PyBool_Check(obj.ptr()) || PyLong_Check(obj.ptr()) || PyFloat_Check(obj.ptr())) return true;
  // NumPy's scalars (np.float32(2), np.int64(3)), which are not Python ints or floats.
  py::object generic = py::module_::import("numpy").attr("generic");
  return py::isinstance(obj, generic) && py::hasattr(obj, "item") &&
         !PyComplex_Check(obj.attr("item")().ptr());
}

// The module of `obj`'s type ("numpy", "builtins", ...), "" where it has none.
std::string module_of(const py::handle& obj) {
  const py::handle type = py::type::handle_of(obj);
  return py::hasattr(type, "__module__") ? py::str(type.attr("__module__")).cast<std::string>() : "";
}

// Data ev.tensor makes a tensor of, given where an op takes a tensor: a NumPy object, a list
// or a tuple. Such an operand is pointed to ev.tensor (refuse_operand), not left to Python.
bool array_like(const py::handle& obj) {
  return py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj) || module_of(obj) == "numpy";
}

// What to say of an operand that is not an eventide tensor, nor a number where one is taken.
[[noreturn]] void refuse_operand(const py::handle& obj, const std::string& op, const char* which) {
  const std::string type = py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
  const std::string module = module_of(obj);
  if (array_like(obj)) {
    throw py::type_error(op + ": " + which + " is a " + (module.empty() || module == "builtins" ? type : module + "." + type) +
                         ", not an eventide.Tensor: make one with ev.tensor(" + which +
                         ") (a copy, on the default device) or ev.from_numpy(" + which +
                         ") (sharing a NumPy array's memory on the cpu)");
  }
  throw py::type_error(op + ": " + which + " is a " + type + ", not an eventide.Tensor" +
                       " (torch's and CuPy's tensors: ev.from_dlpack(x))");
}

const Tensor& tensor_operand(const py::handle& obj, const std::string& op, const char* which) {
  if (!py::isinstance<Tensor>(obj)) refuse_operand(obj, op, which);
  return obj.cast<const Tensor&>();
}

// A tensor of `like`'s shape, dtype and device, every element `value` (a Python or NumPy
// number): the other operand of `t + 1.0`. eventide does not promote dtypes, so a value the
// dtype cannot hold exactly is refused rather than rounded.
Tensor scalar_like(const Tensor& like, const py::handle& value, const std::string& op) {
  py::object v = py::reinterpret_borrow<py::object>(value);
  if (!PyBool_Check(v.ptr()) && !PyLong_Check(v.ptr()) && !PyFloat_Check(v.ptr())) v = v.attr("item")();
  const DType dtype = like.dtype();
  const std::string text = py::repr(v).cast<std::string>();
  double x = 0;
  if (PyFloat_Check(v.ptr())) {
    x = PyFloat_AS_DOUBLE(v.ptr());
    if (!is_floating(dtype) && (!std::isfinite(x) || x != std::trunc(x))) {
      throw InvalidArgument(op + ": the tensor is " + py_name(dtype) + " and " + text +
                            " is not a whole number; eventide does not promote dtypes (PyTorch would "
                            "give float32): use a floating tensor, or a whole number");
    }
  } else {
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
    constexpr long long kExact = 1LL << 53;  // whole numbers a double holds exactly
    const bool fits = overflow == 0 && n >= -kExact && n <= kExact &&
                      (dtype != DType::i32 || (n >= std::numeric_limits<std::int32_t>::min() &&
                                               n <= std::numeric_limits<std::int32_t>::max()));
    if (!fits && !is_floating(dtype)) {
      throw InvalidArgument(op + ": " + text + " does not fit in the tensor's " + py_name(dtype) +
                            (dtype == DType::i32 ? "" : " exactly (at most 2**53 in magnitude here)"));
    }
    x = PyFloat_AsDouble(v.ptr());  // exact up to 2**53; a floating dtype rounds beyond
    if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  }
  return eventide::full(like.shape(), x, dtype, like.device());
}

// a <op> b where either may be a number (not both): an elementwise op on the current stream.
template <class Fn>
Tensor elementwise(Fn&& fn, const char* op, const py::object& a, const py::object& b) {
  const bool ta = py::isinstance<Tensor>(a), tb = py::isinstance<Tensor>(b);
  sync_current_streams();
  if (ta && tb) return fn(a.cast<const Tensor&>(), b.cast<const Tensor&>());
  if (ta && is_scalar(b)) {
    const Tensor& x = a.cast<const Tensor&>();
    return fn(x, scalar_like(x, b, op));
  }
  if (tb && is_scalar(a)) {
    const Tensor& y = b.cast<const Tensor&>();
    return fn(scalar_like(y, a, op), y);
  }
  if (!ta) refuse_operand(a, op, "a");
  refuse_operand(b, op, "b");
}

// The operator form: `other` on the right (or, reflected, on the left: 1.0 - t). An operand
// it does not take is NotImplemented, so that Python asks the other one (and says "unsupported
// operand type(s)" if neither takes it), except for arrays and lists, which are pointed to
// ev.tensor.
py::object operator_form(BinaryFn fn, const char* op, const py::object& self, const py::object& other,
                         bool reflected) {
  if (!py::isinstance<Tensor>(other) && !is_scalar(other) && !array_like(other)) {
    return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  }
  return py::cast(reflected ? elementwise(fn, op, other, self) : elementwise(fn, op, self, other));
}

// The `out=` of an op: None, or the eventide.Tensor to write.
const Tensor* out_operand(const py::object& out, const std::string& op) {
  if (out.is_none()) return nullptr;
  if (!py::isinstance<Tensor>(out)) {
    throw py::type_error(op + ": out must be an eventide.Tensor to write the result into, got a " +
                         py::str(py::type::handle_of(out).attr("__qualname__")).cast<std::string>());
  }
  return &out.cast<const Tensor&>();
}

Tensor py_matmul(const py::object& a, const py::object& b, const py::object& out) {
  const Tensor& x = tensor_operand(a, "matmul", "a");
  const Tensor& y = tensor_operand(b, "matmul", "b");
  const Tensor* o = out_operand(out, "matmul");
  sync_current_streams();
  return o ? eventide::matmul_out(*o, x, y) : eventide::matmul(x, y);
}
Tensor py_cast(const Tensor& t, const py::object& dtype) {
  if (dtype.is_none()) throw InvalidArgument("cast: dtype must be a dtype, got None");
  sync_current_streams();
  return eventide::cast(t, to_dtype(dtype));
}
// ev.cast(t, dtype, out=None): with out, dtype may be left out (out's), or must be out's.
Tensor py_cast_fn(const Tensor& t, const py::object& dtype, const py::object& out) {
  const Tensor* o = out_operand(out, "cast");
  if (!o) return py_cast(t, dtype);
  if (!dtype.is_none() && to_dtype(dtype) != o->dtype()) {
    throw InvalidArgument(std::string("cast: dtype ") + py_name(to_dtype(dtype)) + " is not out's (" + py_name(o->dtype()) +
                          "): leave dtype out, or give an out of that dtype");
  }
  sync_current_streams();
  return eventide::cast_out(*o, t);
}

// A creation function's `out=`: its shape (if given), dtype and device (if given) must be
// out's.
void check_creation_out(const char* op, const Tensor& o, const Shape* shape, const py::object& dtype,
                        const py::object& device) {
  if (shape && *shape != o.shape()) {
    throw InvalidArgument(std::string(op) + ": the shape " + to_string(*shape) + " is not out's (" +
                          to_string(o.shape()) + "): leave the shape out, or give an out of that shape");
  }
  if (!dtype.is_none() && to_dtype(dtype) != o.dtype()) {
    throw InvalidArgument(std::string(op) + ": dtype " + std::string(py_name(to_dtype(dtype))) + " is not out's (" +
                          py_name(o.dtype()) + ")");
  }
  if (!device.is_none() && device_or_default(device) != o.device()) {
    throw InvalidArgument(std::string(op) + ": device " + device_or_default(device).str() + " is not out's (" +
                          o.device().str() + ")");
  }
}


void refuse_values_beyond(const py::array& values, DType want) {
  const std::string kind = py::str(values.dtype().attr("kind")).cast<std::string>();
  if (values.size() == 0 || (kind != "f" && kind != "i" && kind != "u" && kind != "O")) return;
  py::object lo, hi;
  try {
    lo = values.attr("min")();  // (a NaN in a float array is its min and its max)
    hi = values.attr("max")();
  } catch (const py::error_already_set&) {
    if (kind != "O") throw;
    return;  // objects that do not compare
  }
  auto as_python = [](py::object v) { return py::hasattr(v, "item") ? v.attr("item")() : v; };
  lo = as_python(lo);
  hi = as_python(hi);
  const bool i32 = want == DType::i32;
  const std::int64_t min_value = i32 ? std::numeric_limits<std::int32_t>::min()
                                     : std::numeric_limits<std::int64_t>::min();
  const std::int64_t max_value = i32 ? std::numeric_limits<std::int32_t>::max()
                                     : std::numeric_limits<std::int64_t>::max();
  const py::int_ min(min_value), max(max_value);
  auto fits = [&](const py::object& v) {
    if (PyFloat_Check(v.ptr()) && !std::isfinite(PyFloat_AS_DOUBLE(v.ptr()))) return false;
    if (!PyFloat_Check(v.ptr()) && !PyLong_Check(v.ptr())) return true;  // the cast decides
    py::object whole = py::reinterpret_steal<py::object>(PyNumber_Long(v.ptr()));  // truncates
    if (!whole) throw py::error_already_set();
    return !(whole < min) && !(whole > max);
  };
  if (!fits(lo) || !fits(hi)) {
    throw InvalidArgument("tensor: the values (" + py::str(lo).cast<std::string>() + " to " +
                          py::str(hi).cast<std::string>() + ") do not fit in " + py_name(want) +
                          " (" + std::to_string(min_value) + " to " + std::to_string(max_value) +
                          ")");
  }
}

// ev.tensor(data): a copy of any array-like. Python floats become float32 and ints int64 (as
// in PyTorch) unless `dtype` says otherwise; NumPy arrays keep their dtype.
Tensor tensor_from_data(const py::object& data, const py::object& dtype_obj,
                        const py::object& device_obj) {
  py::module_ np = py::module_::import("numpy");
  Device device = device_or_default(device_obj);
  sync_current_streams();
  if (py::isinstance<Tensor>(data)) {
    Tensor t = data.cast<Tensor>();
    if (!dtype_obj.is_none() && to_dtype(dtype_obj) != t.dtype()) {
      throw InvalidArgument("tensor: converting the dtype of a tensor is not supported");
    }
    return t.to(device);
  }
  // np.asarray(order="C"), not ascontiguousarray, which makes a 0-d array 1-d.
  auto as_array = [&](py::object dtype) -> py::array {
    try {
      return np.attr("asarray")(data, "dtype"_a = dtype, "order"_a = "C");
    } catch (const py::error_already_set& e) {
      // (OverflowError: an int beyond 64 bits in data not all numbers, [2**64, "1"])
      if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError) &&
          !e.matches(PyExc_OverflowError)) {
        throw;
      }
      throw InvalidArgument(std::string("tensor: cannot make an array of the data: ") + e.what());
    }
  };
  py::array arr;
  if (dtype_obj.is_none()) {
    arr = native_order(as_array(py::none()));
    if (!py::isinstance<py::array>(data)) {
      std::string kind = py::str(arr.dtype().attr("kind")).cast<std::string>();
      if (kind == "f") arr = arr.attr("astype")("float32", "order"_a = "C");
      // NumPy makes ints beyond int64 uint64 ([2**63]) or objects ([2**64]).
      if (kind == "u" || kind == "O") refuse_values_beyond(arr, DType::i64);
      if (kind == "i" || kind == "u" || kind == "b") arr = arr.attr("astype")("int64", "order"_a = "C");
    }
  } else {
    DType want = to_dtype(dtype_obj);
    if (want == DType::bf16) {
      py::array f = as_array(py::str("float32"));
      std::vector<std::uint16_t> bits(static_cast<std::size_t>(f.size()));
      const float* src = static_cast<const float*>(f.data());
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16(src[i]);
      Shape shape(f.shape(), f.shape() + f.ndim());
      return eventide::from_host(bits.data(), std::move(shape), DType::bf16, device);
    }
    if (want == DType::i32 || want == DType::i64) {
      refuse_values_beyond(native_order(as_array(py::none())), want);
    }
    arr = as_array(py::str(py_name(want)));
  }
  auto dtype = from_numpy_dtype(arr.dtype());
  if (!dtype) {
    throw InvalidArgument("tensor: unsupported dtype " + py::str(arr.dtype()).cast<std::string>());
  }
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  return eventide::from_host(arr.data(), std::move(shape), *dtype, device);
}


// "<eventide.Tensor (512, 512) float32 on cpu, ready>", in the style of the events' reprs.
std::string tensor_repr(const Tensor& t) {
  if (!t.defined()) return "<eventide.Tensor undefined>";
  const char* status = !t.ready() ? "pending" : t.error() ? "failed" : "ready";
  return "<eventide.Tensor " + py::repr(to_tuple(t.shape())).cast<std::string>() + " " +
         py_name(t.dtype()) + " on " + t.device().str() + ", " + status + ">";
}


}  // namespace

bool wait_tensor_for(const Tensor& t, std::optional<double> timeout) {
  if (!wait_interruptible([&] { return t.ready(); },
                          [&](nanoseconds slice) { return t.wait_for(slice); }, timeout)) {
    return false;
  }
  if (auto e = t.error()) std::rethrow_exception(e);
  return true;
}

void wait_tensor(const Tensor& t) { (void)wait_tensor_for(t, std::nullopt); }

void bind_tensors(py::module_& m) {
  // --- Tensors ---
  py::class_<Tensor> tensor_class(m, "Tensor", "A dense array on a device; ops on it are asynchronous.");
  // NumPy's operators defer to ours (np.float32(2) * t, array + t: our reflected forms), as
  // they do to torch's tensors, instead of turning the tensor into an array.
  tensor_class.attr("__array_priority__") = 1000;
  tensor_class
      .def_property_readonly("shape", [](const Tensor& t) { return to_tuple(t.shape()); },
                             "The extents, a tuple of ints.")
      .def_property_readonly("dtype", &Tensor::dtype, "The element type (eventide.float32, ...).")
      .def_property_readonly("device", &Tensor::device, "The device that holds the memory.")
      .def_property_readonly("ndim", &Tensor::dim, "The number of dimensions.")
      .def_property_readonly("nbytes", &Tensor::nbytes, "The size of the elements, in bytes.")
      .def_property_readonly("ready", &Tensor::ready,
                             "True once the producing op has finished (also if it failed); never "
                             "blocks.")
      .def_property_readonly("error", [](const Tensor& t) -> py::object {
        auto err = t.error();
        return err ? to_python_exception(err) : py::none();
      }, "The exception of the producing op if it failed, else None (never blocks).")
      .def("numel", &Tensor::numel, "The number of elements.")
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("wait",
           [](const Tensor& t, const py::object& timeout) {
             return wait_tensor_for(t, parse_timeout(timeout));
           },
           "timeout"_a = py::none(),
           "wait(timeout=None) -> bool: block until the producing op has finished (True; raises "
           "its error) or `timeout` seconds pass (False).")
      .def("add_completion_callback",
           [](const Tensor& t, const py::object& fn) {
             t.add_completion_callback(to_callback(fn, "add_completion_callback"));
           },
           "fn"_a,
           "Call fn() once when the producing op finishes (also if it failed), on the runtime's "
           "callback thread.")
      .def("numpy", &to_numpy, "A read-only NumPy view (cpu) or copy; waits for the producer.")
      .def("__array__",
           [](const Tensor& t, const py::object& dtype, const py::object& copy) -> py::object {
             py::object arr = to_numpy(t);
             bool want_copy = !copy.is_none() && copy.cast<bool>();
             if (!dtype.is_none()) return arr.attr("astype")(dtype);
             return want_copy ? arr.attr("copy")() : arr;
           },
           "dtype"_a = py::none(), "copy"_a = py::none())
      .def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); })
      .def("__dlpack__", &dlpack_method, py::kw_only(), "stream"_a = py::none(),
           "max_version"_a = py::none(), "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__dlpack_device__", &dlpack_device)
      .def("to", [](const Tensor& t, const py::object& d) {
             sync_current_streams();
             return t.to(device_or_default(d));
           },
           "device"_a, "A copy on `device` (the same tensor if it is there already), "
           "asynchronous.")
      .def("copy_",
           [](const py::object& self, const py::object& src) {
             const Tensor& from = tensor_operand(src, "copy_", "src");
             sync_current_streams();
             self.cast<Tensor&>().copy_(from);
             return self;
           },
           "src"_a,
           "Copies src (of this tensor's shape and dtype, on any device) into this tensor, in place "
           "and asynchronously; returns this tensor.")
      .def("astype", &py_cast, "dtype"_a,
           "A copy with the elements converted to `dtype` (between float32, float64, float16 and "
           "bfloat16, rounded to nearest even), on the tensor's device, asynchronous: e.g. "
           "t.astype(ev.float32).numpy() for a bfloat16 tensor.")
      .def("cpu", [](const Tensor& t) {
             sync_current_streams();
             return t.to(Device::cpu());
           },
           "A copy on the cpu (the same tensor if it is there), asynchronous: t.to('cpu').")
      .def("cuda", [](const Tensor& t, const py::object& device) {
             sync_current_streams();
             py::object spec = device.is_none() ? py::str("cuda:0")
                               : PyLong_Check(device.ptr()) ? py::str("cuda:" + py::str(device).cast<std::string>())
                                                            : device;
             return t.to(device_or_default(spec));
           },
           "device"_a = py::none(),
           "A copy on a GPU (cuda:0, or `device`: an index or a device), asynchronous.")
      .def("__matmul__", [](const py::object& self, const py::object& other) -> py::object {
             if (!py::isinstance<Tensor>(other) && !array_like(other)) {
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             }
             return py::cast(py_matmul(self, other, py::none()));
           }, "other"_a)
      .def("__add__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::add, "add", t, o, false); }, "other"_a)
      .def("__radd__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::add, "add", t, o, true); }, "other"_a)
      .def("__sub__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::sub, "sub", t, o, false); }, "other"_a)
      .def("__rsub__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::sub, "sub", t, o, true); }, "other"_a)
      .def("__mul__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::mul, "mul", t, o, false); }, "other"_a)
      .def("__rmul__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::mul, "mul", t, o, true); }, "other"_a)
      .def("__truediv__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::div, "div", t, o, false); }, "other"_a)
      .def("__rtruediv__", [](const py::object& t, const py::object& o) { return operator_form(&eventide::div, "div", t, o, true); }, "other"_a)
      .def("__neg__", [](const py::object& t) { return elementwise(&eventide::mul, "neg", t, py::int_(-1)); })
      .def("__getitem__", [](const Tensor& t, const py::object&) -> py::object {
             throw py::type_error("eventide.Tensor cannot be indexed or sliced: its ops are whole-tensor "
                                  "(+, -, *, /, @, astype, to, cpu); index a NumPy view of it, t.numpy()[...] "
                                  "(waits for the tensor), or share it with PyTorch, torch.from_dlpack(t)");
           })
      .def("__getattr__", [](const Tensor& t, const std::string& name) -> py::object {
             (void)t;
             throw py::attribute_error(
                 "'eventide.Tensor' object has no attribute '" + name +
                 "'. A tensor has: shape, dtype, device, ndim, nbytes, numel(), ready, error, wait(), "
                 "add_completion_callback(), to(), cpu(), cuda(), astype(), numpy(), tolist(), "
                 "__dlpack__(); operators +, -, *, / (with tensors or numbers), @ and unary -. "
                 "Reductions, indexing and reshapes are not eventide ops: use t.numpy() or "
                 "torch.from_dlpack(t)");
           })
      .def("__repr__", &tensor_repr);

  // out=: the values written into that tensor, in place (empty has no values to write).
  using OutFn = Tensor (*)(const Tensor&);
  auto creation = [&m](const char* name, Tensor (*fn)(Shape, DType, Device), OutFn out_fn, const char* doc) {
    m.def(name,
          [fn, out_fn, name](const py::args& shape, const py::object& dtype, const py::object& device,
                             const py::object& out) -> py::object {
            const Tensor* o = out_fn ? out_operand(out, name) : nullptr;
            if (!out_fn && !out.is_none()) {
              throw InvalidArgument(std::string(name) + ": has no out= (an empty tensor has no values to write)");
            }
            if (o) {
              const Shape given = to_shape(shape, name);
              check_creation_out(name, *o, shape.empty() ? nullptr : &given, dtype, device);
              sync_current_streams();
              out_fn(*o);
              return out;
            }
            sync_current_streams();
            return py::cast(fn(to_shape(shape, name), to_dtype(dtype), device_or_default(device)));
          },
          "dtype"_a = py::none(), "device"_a = py::none(), "out"_a = py::none(), doc);
  };
  creation("empty", &eventide::empty, nullptr, "An uninitialized tensor: empty(2, 3) or empty((2, 3)).");
  creation("zeros", &eventide::zeros, &eventide::zeros_out, "A tensor of zeros (out=t: t set to zeros, in place).");
  creation("ones", &eventide::ones, &eventide::ones_out, "A tensor of ones (out=t: in place).");
  creation("rand", &eventide::rand, &eventide::rand_out, "Uniform random numbers in [0, 1) (out=t: in place).");
  creation("randn", &eventide::randn, &eventide::randn_out, "Standard normal random numbers (out=t: in place).");
  m.def("full",
        [](const py::object& shape, double value, const py::object& dtype, const py::object& device,
           const py::object& out) -> py::object {
          if (PyLong_Check(dtype.ptr()) || PyFloat_Check(dtype.ptr())) {
            throw InvalidArgument("full: the dtype is " + py::repr(dtype).cast<std::string>() +
                                  ", a number: full takes the shape as one argument, then the value: "
                                  "ev.full((2, 2), 3.0), not ev.full(2, 2, 3.0)");
          }
          const Shape given = to_shape(py::make_tuple(shape), "full");
          if (const Tensor* o = out_operand(out, "full")) {
            check_creation_out("full", *o, &given, dtype, device);
            sync_current_streams();
            eventide::full_out(*o, value);
            return out;
          }
          sync_current_streams();
          return py::cast(eventide::full(given, value, to_dtype(dtype), device_or_default(device)));
        },
        "shape"_a, "fill_value"_a, "dtype"_a = py::none(), "device"_a = py::none(), py::kw_only(),
        "out"_a = py::none());
  m.def("tensor", &tensor_from_data, "data"_a, "dtype"_a = py::none(), "device"_a = py::none(),
        "A copy of `data` (a list, a NumPy array, anything np.asarray takes) on the device.");
  m.def("from_numpy", &from_numpy, "array"_a, "device"_a = py::none(),
        "A tensor on the array's memory (no copy on cpu where the layout allows; the array is kept "
        "alive), else a copy.");
  m.def("from_dlpack", &from_dlpack, "x"_a, "A tensor sharing the memory of a DLPack producer.");
  m.def("matmul",
        [](const py::object& a, const py::object& b, const py::object& out) -> py::object {
          Tensor r = py_matmul(a, b, out);
          return out.is_none() ? py::cast(std::move(r)) : out;
        },
        "a"_a, "b"_a, py::kw_only(), "out"_a = py::none(),
        "a @ b; asynchronous, on the current stream (out=t: written into t, which is not a or b).");
  auto elementwise_fn = [&m](const char* name, BinaryFn fn, BinaryOutFn out_fn, const char* doc) {
    m.def(name,
          [fn, out_fn, name](const py::object& a, const py::object& b, const py::object& out) -> py::object {
            const Tensor* o = out_operand(out, name);
            if (!o) return py::cast(elementwise(fn, name, a, b));
            // Checked before a number operand is made into a tensor (nothing is launched for
            // an out that is refused).
            const py::object& like = py::isinstance<Tensor>(a) ? a : b;
            if (py::isinstance<Tensor>(like)) {
              const Tensor& t = like.cast<const Tensor&>();
              eventide::check_out(name, *o, t.shape(), t.dtype(), t.device());
            }
            elementwise([o, out_fn](const Tensor& x, const Tensor& y) { return out_fn(*o, x, y); }, name, a, b);
            return out;  // the out object itself, as PyTorch returns it
          },
          "a"_a, "b"_a, py::kw_only(), "out"_a = py::none(), doc);
  };
  elementwise_fn("add", &eventide::add, &eventide::add_out,
                 "a + b, elementwise (tensors of one shape, dtype and device, or a tensor and a number); "
                 "out=t writes it into t, which may be a or b (ev.add(x, y, out=x): x += y).");
  elementwise_fn("sub", &eventide::sub, &eventide::sub_out, "a - b, elementwise (as add).");
  elementwise_fn("mul", &eventide::mul, &eventide::mul_out, "a * b, elementwise (as add).");
  elementwise_fn("div", &eventide::div, &eventide::div_out,
                 "a / b, elementwise true division, of floating tensors (as add).");
  m.def("cast",
        [](const Tensor& t, const py::object& dtype, const py::object& out) -> py::object {
          Tensor r = py_cast_fn(t, dtype, out);
          return out.is_none() ? py::cast(std::move(r)) : out;
        },
        "tensor"_a, "dtype"_a = py::none(), py::kw_only(), "out"_a = py::none(),
        "tensor.astype(dtype): a copy converted to a floating dtype, on the tensor's device (out=t: "
        "written into t, of that dtype).");
  m.def("manual_seed", [](std::uint64_t seed, const py::object& device) {
    auto d = to_device(device);
    d ? eventide::manual_seed(seed, *d) : eventide::manual_seed(seed);
  }, "seed"_a, "device"_a = py::none());

}

}  // namespace eventide::python
