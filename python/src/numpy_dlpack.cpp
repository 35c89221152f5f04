// NumPy arrays and DLPack capsules, in and out: the memory is shared where the layout allows
// (from_external keeps the lender's object alive and releases it when eventide is done with it)
// and copied otherwise.
#include <algorithm>
#include <memory>
#include <vector>

#include "bindings.hpp"
#include "dlpack.hpp"

namespace eventide::python {

using namespace pybind11::literals;

namespace {

// The owner of an array eventide shares: the array itself, released with the GIL (PyHandle).
std::shared_ptr<void> python_owner(py::object obj) {
  return std::shared_ptr<void>(new PyHandle(std::move(obj)),
                               [](void* p) { delete static_cast<PyHandle*>(p); });
}

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::i32: return py::dtype::of<std::int32_t>();
    case DType::i64: return py::dtype::of<std::int64_t>();
    case DType::f16: return py::dtype("float16");
    case DType::bf16: break;
  }
  throw InvalidArgument("NumPy has no bfloat16: convert the tensor on its device first, t.astype(eventide.float32)");
}

std::vector<py::ssize_t> c_strides(const Shape& shape, std::size_t item) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t s = static_cast<py::ssize_t>(item);
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= static_cast<py::ssize_t>(std::max<std::int64_t>(shape[i], 1));
  }
  return strides;
}

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
  }
  return {kDLFloat, 32, 1};
}

std::optional<DType> from_dl_dtype(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  if (t.code == kDLInt && t.bits == 64) return DType::i64;
  return std::nullopt;
}

DLDevice dl_device(Device d) { return DLDevice{dlpack_device_type(d), d.index()}; }

// What an exported capsule owns: the tensor (its memory) and the shape arrays.
struct Export {
  Tensor keep;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
};

void fill_dl_tensor(Export& ex, DLTensor& t) {
  const Tensor& k = ex.keep;
  t.data = k.data_ptr();
  t.device = dl_device(k.device());
  t.ndim = static_cast<std::int32_t>(k.dim());
  t.dtype = dl_dtype(k.dtype());
  t.shape = ex.shape.data();
  t.strides = ex.strides.data();
  t.byte_offset = 0;
}

constexpr char kVersionedName[] = "dltensor_versioned";
constexpr char kLegacyName[] = "dltensor";

// The capsule of one of the two managed-tensor forms; a capsule never consumed frees the
// export when it is collected.
template <class Managed, const char* Name>
py::capsule export_capsule(Export* ex, Managed& m) {
  m.manager_ctx = ex;
  m.deleter = [](Managed* self) { delete static_cast<Export*>(self->manager_ctx); };
  fill_dl_tensor(*ex, m.dl_tensor);
  PyObject* cap = PyCapsule_New(&m, Name, [](PyObject* c) {
    if (PyCapsule_IsValid(c, Name)) {  // never consumed
      auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(c, Name));
      managed->deleter(managed);
    }
  });
  if (!cap) {
    delete ex;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// `flags` (kDLPackFlag...) go in a versioned capsule; an unversioned one has none.
py::capsule export_dlpack(const Tensor& t, bool versioned, std::uint64_t flags) {
  auto* ex = new Export;
  ex->keep = t;
  ex->shape = t.shape();
  ex->strides.resize(ex->shape.size());
  std::int64_t s = 1;
  for (std::size_t i = ex->shape.size(); i-- > 0;) {
    ex->strides[i] = s;
    s *= std::max<std::int64_t>(ex->shape[i], 1);
  }
  if (versioned) {
    ex->versioned.version = {1, 0};
    ex->versioned.flags = flags;
    return export_capsule<DLManagedTensorVersioned, kVersionedName>(ex, ex->versioned);
  }
  return export_capsule<DLManagedTensor, kLegacyName>(ex, ex->legacy);
}

// The owner of memory imported through DLPack: the managed tensor, released through its
// producer's deleter (which may need the interpreter: with the GIL, and not once it has gone).
template <class Managed>
std::shared_ptr<void> dlpack_owner(void* managed) {
  return std::shared_ptr<void>(managed, [](void* p) {
    if (!python_alive()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    auto* m = static_cast<Managed*>(p);
    if (m->deleter) m->deleter(m);
    PyGILState_Release(gil);
  });
}

}  // namespace

std::optional<DType> from_numpy_dtype(const py::dtype& dt) {
  std::string n = py::str(dt.attr("name")).cast<std::string>();
  if (n == "float32") return DType::f32;
  if (n == "float64") return DType::f64;
  if (n == "int32") return DType::i32;
  if (n == "int64") return DType::i64;
  if (n == "float16") return DType::f16;
  return std::nullopt;
}

py::array to_numpy(const Tensor& t) {
  wait_tensor(t);
  py::dtype dt = numpy_dtype(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.device().is_cpu()) {
    py::capsule base(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
    py::array arr(dt, shape, c_strides(t.shape(), itemsize(t.dtype())), t.data_ptr(), base);
    arr.attr("setflags")("write"_a = false);
    return arr;
  }
  py::array arr(dt, shape);
  {
    py::gil_scoped_release release;
    t.copy_to_host(arr.mutable_data(), t.dtype());
  }
  return arr;
}

// (A big-endian array's values would otherwise be read as little-endian ones.)
py::array native_order(const py::array& arr) {
  if (arr.dtype().attr("isnative").cast<bool>()) return arr;
  return arr.attr("astype")(arr.dtype().attr("newbyteorder")("="));
}

Tensor from_numpy(const py::array& given, const py::object& device_obj) {
  Device device = to_device(device_obj).value_or(Device::cpu());
  const py::array input = native_order(given);
  auto dtype = from_numpy_dtype(input.dtype());
  if (!dtype) {
    throw InvalidArgument("from_numpy: unsupported dtype " +
                          py::str(input.dtype()).cast<std::string>() +
                          " (supported: float32, float64, int32, int64, float16)");
  }
  Shape shape(input.shape(), input.shape() + input.ndim());
  check_shape("from_numpy", shape, *dtype);
  const bool contiguous = (input.flags() & py::array::c_style) != 0;
  const bool aligned = (input.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
  if (device.is_cpu() && contiguous && aligned) {
    // No copy: the tensor reads the array's memory, and keeps the array alive. An array with
    // writeable=False stays read-only to whoever gets the memory through eventide.
    void* data = const_cast<void*>(input.data());
    ExternalMemory memory{data, python_owner(input),
                          input.writeable() ? Access::read_write : Access::read_only};
    return from_external(std::move(memory), std::move(shape), *dtype, device);
  }
  py::array compact = py::module_::import("numpy").attr("ascontiguousarray")(input);
  sync_current_streams();
  return eventide::from_host(compact.data(), std::move(shape), *dtype, device);
}

// Refuses the values of `values` that the integer dtype `want` cannot hold, as ev.full refuses
// its value, rather than letting NumPy's cast wrap them around (2**63 becomes -2**63) or turn
// NaN into some integer: integers beyond its range, floats whose integer part (the cast
// truncates toward zero) is beyond it, NaN and infinities. The extremes are compared as Python
// numbers, which compare exactly: NumPy compares a uint64 or a float with an int64 bound in
// double, where 2**63 - 1 rounds to 2**63. Objects that are not numbers are left to the cast to
// refuse.

py::capsule dlpack_method(const Tensor& t, const py::object& stream, const py::object& max_version,
                          const py::object& dl_device_obj, const py::object& copy) {
  // The array API standard: the stream is an int or None, anything else is a TypeError.
  if (!stream.is_none() && (!PyLong_Check(stream.ptr()) || PyBool_Check(stream.ptr()))) {
    throw py::type_error("__dlpack__: stream must be an int or None, got " +
                         py::repr(stream).cast<std::string>());
  }
  const Device device = t.device();
  // (device_type, device_id) and (major, minor): pairs of ints, else a TypeError naming them.
  auto int_pair = [](const py::object& obj, const char* what) {
    try {
      if (!py::isinstance<py::tuple>(obj) || py::len(obj) != 2) throw py::cast_error();
      return obj.cast<std::pair<int, int>>();
    } catch (const py::cast_error&) {
      throw py::type_error(std::string("__dlpack__: ") + what + " must be a tuple of two ints, got " +
                           py::repr(obj).cast<std::string>());
    }
  };
  if (!dl_device_obj.is_none()) {
    auto want = int_pair(dl_device_obj, "dl_device");
    DLDevice have = dl_device(device);
    if (want.first != have.device_type || want.second != have.device_id) {
      throw py::buffer_error("__dlpack__: cannot export a tensor on " + device.str() +
                             " to another device");
    }
  }
  if (device.is_cpu() && !stream.is_none()) {
    throw py::buffer_error("__dlpack__: stream must be None for a cpu tensor");
  }
  bool versioned = false;
  if (!max_version.is_none()) {
    auto v = int_pair(max_version, "max_version");
    versioned = v.first >= 1;
  }
  if (!copy.is_none() && !PyBool_Check(copy.ptr())) {
    throw py::type_error("__dlpack__: copy must be None, True or False, got " + py::repr(copy).cast<std::string>());
  }
  const bool copied = !copy.is_none() && copy.cast<bool>();
  // Read-only memory (lent so by its owner) stays read-only: a versioned capsule says so; an
  // unversioned one cannot, and is refused, as NumPy refuses a read-only array's. (Before the
  // handshake below, which changes the consumer's stream.)
  const bool read_only = !copied && t.access() == Access::read_only;
  if (read_only && !versioned) {
    throw py::buffer_error("__dlpack__: the tensor's memory is read-only, which an unversioned "
                           "DLPack capsule cannot say; pass max_version=(1, 0), or copy=True");
  }
  if (!device.is_cpu() && !stream.is_none()) {
    // The handshake: the consumer's stream waits, on the GPU, for the tensor's producer
    // (-1: the consumer asks for no ordering). Stream::wait with the native scope orders every
    // later launch there, the consumer's own kernels included; where the producer is held on
    // the host (behind a UserEvent), it blocks until it has finished, with the GIL let go.
    std::intptr_t number = stream.cast<std::intptr_t>();
    if (number != -1) {
      sync_current_streams();
      Stream consumer = Stream::from_native(device, native_from_number(number));
      Event e(device);
      e.record(t);
      wait_interruptible([] { return false; },
                         [&](std::chrono::nanoseconds) {
                           consumer.wait(e, WaitScope::native_stream);
                           return true;
                         },
                         std::nullopt);
    }
  } else {
    // The consumer reads the memory as soon as it has the capsule: the producer must be done.
    wait_tensor(t);
  }
  Tensor out = t;
  if (copied) {
    sync_current_streams();
    out = eventide::from_host(t.data_ptr(), t.shape(), t.dtype(), device);
    wait_tensor(out);
  }
  return export_dlpack(out, versioned,
                       (read_only ? kDLPackFlagReadOnly : 0) | (copied ? kDLPackFlagIsCopied : 0));
}

Tensor from_dlpack(const py::object& obj) {
  py::object cap = obj;
  if (py::hasattr(obj, "__dlpack__")) {
    // For GPU memory, the producer makes our current stream of that device wait for it.
    py::object stream = py::none();
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      std::optional<Device> d = from_dlpack_device(dev.first, dev.second);
      if (d && !d->is_cpu()) {
        if (!is_available(*d)) throw InvalidArgument("from_dlpack: " + d->str() + " is not available");
        sync_current_streams();
        stream = py::int_(reinterpret_cast<std::intptr_t>(Stream::current(*d).native_handle()));
      }
    }
    try {
      cap = obj.attr("__dlpack__")("stream"_a = stream, "max_version"_a = py::make_tuple(1, 0));
    } catch (const py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      // A producer that predates DLPack 1.0.
      cap = stream.is_none() ? obj.attr("__dlpack__")() : obj.attr("__dlpack__")("stream"_a = stream);
    }
  }
  if (!PyCapsule_CheckExact(cap.ptr())) {
    throw InvalidArgument("from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got " +
                          py::repr(obj).cast<std::string>());
  }
  bool versioned = PyCapsule_IsValid(cap.ptr(), "dltensor_versioned");
  if (!versioned && !PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    throw InvalidArgument("from_dlpack: the capsule was already consumed or is not a DLPack tensor");
  }
  void* managed = PyCapsule_GetPointer(cap.ptr(), versioned ? "dltensor_versioned" : "dltensor");
  Access access = Access::read_write;  // (an unversioned capsule cannot say read-only)
  if (versioned) {
    // dlpack.h: another major version lays the struct out differently; none of its fields but
    // the version may be read. Refused unconsumed, as NumPy refuses a newer one: the capsule
    // releases it through the producer's deleter when it goes.
    const auto& m = *static_cast<DLManagedTensorVersioned*>(managed);
    if (m.version.major != 1) {
      throw InvalidArgument("from_dlpack: the capsule is DLPack version " +
                            std::to_string(m.version.major) + "." +
                            std::to_string(m.version.minor) +
                            "; eventide reads major version 1 only");
    }
    if (m.flags & kDLPackFlagReadOnly) access = Access::read_only;
  }
  DLTensor& t = versioned ? static_cast<DLManagedTensorVersioned*>(managed)->dl_tensor
                          : static_cast<DLManagedTensor*>(managed)->dl_tensor;
  std::optional<Device> found = from_dlpack_device(t.device.device_type, t.device.device_id);
  if (!found) {
    throw InvalidArgument("from_dlpack: unsupported DLPack device type " +
                          std::to_string(t.device.device_type));
  }
  const Device device = *found;
  if (!is_available(device)) throw InvalidArgument("from_dlpack: device " + device.str() + " is not available");
  auto dtype = from_dl_dtype(t.dtype);
  if (!dtype) {
    throw InvalidArgument("from_dlpack: unsupported DLPack dtype (code " + std::to_string(t.dtype.code) +
                          ", " + std::to_string(t.dtype.bits) + " bits, " +
                          std::to_string(t.dtype.lanes) + " lanes)");
  }
  // A capsule may be built by any code: what it says is checked before it is used.
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) {
    throw InvalidArgument("from_dlpack: the DLPack tensor has " + std::to_string(t.ndim) +
                          " dimensions" + (t.ndim > 0 ? " and no shape" : ""));
  }
  Shape shape(t.shape, t.shape + t.ndim);
  check_shape("from_dlpack", shape, *dtype);
  if (!t.data && numel(shape) > 0) {
    throw InvalidArgument("from_dlpack: the DLPack tensor of shape " + to_string(shape) +
                          " has a null data pointer");
  }
  if (t.strides) {
    std::int64_t expect = 1;
    for (int i = t.ndim; i-- > 0;) {
      if (shape[i] != 1 && t.strides[i] != expect) {
        throw InvalidArgument("from_dlpack: only C-contiguous tensors can be shared without a copy; "
                              "make it contiguous first");
      }
      expect *= shape[i];
    }
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  // Ownership moves to the tensor: the capsule is marked consumed.
  PyCapsule_SetName(cap.ptr(), versioned ? "used_dltensor_versioned" : "used_dltensor");
  ExternalMemory memory{data,
                        versioned ? dlpack_owner<DLManagedTensorVersioned>(managed)
                                  : dlpack_owner<DLManagedTensor>(managed),
                        access};
  if (device.is_cpu()) return from_external(std::move(memory), std::move(shape), *dtype, device);
  // The producer ordered our current stream after its work; a marker there stands for that
  // work, so that every stream that uses the tensor is ordered after it too.
  sync_current_streams();
  return from_external(std::move(memory), std::move(shape), *dtype, Stream::current(device));
}


py::tuple dlpack_device(const Tensor& t) {
  DLDevice d = dl_device(t.device());
  return py::make_tuple(d.device_type, d.device_id);
}

}  // namespace eventide::python
