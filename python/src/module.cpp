// The `eventide._eventide` extension: the C++ API for Python.
//
// Threads: every blocking call releases the GIL and waits in slices so that Ctrl-C
// (KeyboardInterrupt) ends it; Python callbacks run on the runtime's callback thread holding
// the GIL only while they run, and an exception in one goes to sys.unraisablehook.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "dlpack.hpp"
#include "eventide/eventide.hpp"
#include "ops/half.hpp"
#include "ops/kernels.hpp"
#include "py_support.hpp"

namespace eventide::python {
namespace {

using namespace pybind11::literals;
using std::chrono::nanoseconds;

// --- Conversions ---------------------------------------------------------------------------

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

// None (the default), an eventide dtype, a name ("float32", "f32"), a NumPy dtype or type, or
// a torch dtype.
DType to_dtype(const py::handle& obj, DType fallback = DType::f32) {
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

// Shapes: ints, or one sequence of ints: rand(2, 3) == rand((2, 3)).
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

// --- Callbacks -----------------------------------------------------------------------------

// A Python callable run by the runtime's callback thread.
// Plain C API, no C++ object on this frame: while the interpreter finalizes, CPython ends a
// thread that tries to take the GIL (or takes it back in time.sleep) with pthread_exit, and
// that forced unwind must pass through here touching nothing of Python's (Dispatcher::run
// lets it go on).
struct PyCallback {
  PyHandle fn;
  void operator()() {
    if (!python_alive()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* result = PyObject_CallNoArgs(fn.get().ptr());
    if (result) {
      Py_DECREF(result);
    } else {
      // "Exception ignored in: <the callable>": names which callback failed.
      PyErr_WriteUnraisable(fn.get().ptr());
    }
    PyGILState_Release(gil);
  }
};

detail::Callback to_callback(const py::object& fn, const char* where) {
  if (!PyCallable_Check(fn.ptr())) {
    throw InvalidArgument(std::string(where) + ": the callback is not callable: " +
                          py::repr(fn).cast<std::string>());
  }
  return detail::Callback(PyCallback{PyHandle(fn)});
}

// --- A UserEvent held by its own callbacks ---------------------------------------------------
//
// A Python callback on a pending UserEvent that refers to that UserEvent (`u.add_callback(
// lambda: u)`, a closure over it, the future of an `await u`) makes a cycle through C++: the
// event holds the callback, the callback the Python UserEvent, and that the handle whose going
// would fail the event. Python's collector sees the cycle because a UserEvent object reports
// (tp_traverse) the Python callables waiting on its event while only it can finish the event:
// it is the last handle, and the event's set step is pending. When the collector finds the cycle
// unreachable, it first finalizes the UserEvent (tp_finalize): the event fails as when the last
// handle goes, so streams and events waiting on it get that error, and its callbacks are
// handed to the dispatcher. From then on they are not the UserEvent's to report: the collector
// sees them referenced from outside and frees nothing (nothing is cleared under a callback that
// is still to run: a cleared function crashes when called). The callbacks run once, with the
// failure, as on any failed event; when they have, nothing holds the cycle and reference
// counting frees it. A UserEvent finalized once (and revived by its callbacks) reports nothing
// any more: the collector calls tp_finalize only once per object.

UserEvent* user_event_of(PyObject* self) noexcept {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  py::detail::value_and_holder vh = inst->get_value_and_holder(nullptr, /*throw_if_missing=*/false);
  if (!vh || !vh.holder_constructed()) return nullptr;  // not initialized, or being destroyed
  return static_cast<UserEvent*>(vh.value_ptr());
}

bool finalized(PyObject* self) noexcept {
#if PY_VERSION_HEX >= 0x03090000
  return PyObject_GC_IsFinalized(self) != 0;
#else
  (void)self;
  return true;  // it cannot be told: report nothing (such cycles are not collected)
#endif
}

extern "C" int user_event_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));  // a heap type: its instances hold a reference to it
  if (finalized(self)) return 0;
  UserEvent* u = user_event_of(self);
  // Another handle (a C++ copy) could set the event, and would make its callbacks someone
  // else's too; one handle per Python object keeps each callable reported once.
  if (u == nullptr || u->handle_count() != 1) return 0;
  return u->state()->visit_callbacks_held_by_handles([&](detail::Callback& callback) -> int {
    if (PyCallback* c = callback.target<PyCallback>()) Py_VISIT(c->fn.get().ptr());
    return 0;
  });
}

extern "C" void user_event_finalize(PyObject* self) {
  UserEvent* u = user_event_of(self);
  if (u == nullptr || u->handle_count() != 1) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // a finalizer leaves the error indicator alone
  u->state()->user_abandon();  // what dropping the last handle does: fails it if unset
  PyErr_Restore(type, value, traceback);
}

extern "C" void user_event_dealloc(PyObject* self) {
  // No collection may look at the object while its C++ object is being destroyed (that can
  // run Python code: the releases the runtime deferred).
  PyObject_GC_UnTrack(self);
  py::detail::pybind11_object_dealloc(self);
}

void setup_user_event_type(PyHeapTypeObject* heap_type) {
  PyTypeObject* type = &heap_type->ht_type;
  type->tp_flags |= Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = &user_event_traverse;
  type->tp_finalize = &user_event_finalize;
  type->tp_dealloc = &user_event_dealloc;
}

// --- Waiting -------------------------------------------------------------------------------

bool wait_event(const Event& e, const py::object& timeout) {
  auto& state = *e.state();
  bool done = wait_interruptible([&] { return state.poll(); },
                                 [&](nanoseconds slice) {
                                   return state.wait_until(detail::deadline_after(slice));
                                 },
                                 parse_timeout(timeout));
  if (done) {
    if (auto err = state.error()) std::rethrow_exception(err);
  }
  return done;
}

// Tensor.wait(timeout): true once the producer has finished (raising its error), false on
// timeout.
bool wait_tensor_for(const Tensor& t, std::optional<double> timeout) {
  if (!wait_interruptible([&] { return t.ready(); },
                          [&](nanoseconds slice) { return t.wait_for(slice); }, timeout)) {
    return false;
  }
  if (auto e = t.error()) std::rethrow_exception(e);
  return true;
}

void wait_tensor(const Tensor& t) { (void)wait_tensor_for(t, std::nullopt); }

// Stream.synchronize(), ev.synchronize(): every stream's sync point (a marker on a GPU
// stream, placed once), waited for in slices; then a failed device raises.
void synchronize_streams(const std::vector<std::shared_ptr<detail::StreamState>>& streams) {
  std::vector<std::uint64_t> points;
  points.reserve(streams.size());
  for (const auto& s : streams) points.push_back(s->sync_point());
  for (std::size_t i = 0; i < streams.size(); ++i) {
    detail::Timeline& timeline = streams[i]->timeline();
    const std::uint64_t point = points[i];
    wait_interruptible([&] { return timeline.passed(point); },
                       [&](nanoseconds slice) {
                         return detail::wait_for_fence(timeline, point, detail::deadline_after(slice));
                       },
                       std::nullopt);
  }
  for (const auto& s : streams) {
    if (auto e = s->device_error()) std::rethrow_exception(e);
  }
}

std::vector<Event> to_events(const py::sequence& seq, const char* fn) {
  std::vector<Event> events;
  events.reserve(seq.size());
  for (py::handle h : seq) {
    if (!py::isinstance<Event>(h)) {
      throw InvalidArgument(std::string(fn) + ": expected eventide events, got " +
                            py::repr(h).cast<std::string>());
    }
    events.push_back(h.cast<Event>());
  }
  return events;
}

bool wait_all_events(const py::sequence& seq, const py::object& timeout) {
  std::vector<Event> events = to_events(seq, "wait_all");
  auto t = parse_timeout(timeout);
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (t && *t < 1e9) {
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<nanoseconds>(std::chrono::duration<double>(*t));
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].state()->status() == EventStatus::empty) {
      throw StateError("wait_all: event " + std::to_string(i) + " (" + events[i].str() +
                       ") is empty and would never finish");
    }
  }
  for (const Event& e : events) {
    auto& state = *e.state();
    std::optional<double> left;
    if (deadline) {
      left = std::max(0.0, std::chrono::duration<double>(*deadline -
                                                         std::chrono::steady_clock::now()).count());
    }
    bool done = wait_interruptible([&] { return state.poll(); },
                                   [&](nanoseconds slice) {
                                     return state.wait_until(detail::deadline_after(slice));
                                   },
                                   left);
    if (!done) return false;
  }
  for (const Event& e : events) {
    if (auto err = e.error()) std::rethrow_exception(err);
  }
  return true;
}

py::object wait_any_events(const py::sequence& seq, const py::object& timeout) {
  std::vector<Event> events = to_events(seq, "wait_any");
  std::optional<std::size_t> index;
  auto first_done = [&] {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].poll()) return std::optional<std::size_t>(i);
    }
    return std::optional<std::size_t>();
  };
  if (events.empty()) throw InvalidArgument("wait_any: the list of events is empty");
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].state()->status() == EventStatus::empty) {
      throw StateError("wait_any: event " + std::to_string(i) + " (" + events[i].str() +
                       ") is empty and would never finish");
    }
  }
  bool done = wait_interruptible([&] { return (index = first_done()).has_value(); },
                                 [&](nanoseconds slice) {
                                   index = eventide::wait_any(events, slice);
                                   return index.has_value();
                                 },
                                 parse_timeout(timeout));
  if (!done) return py::none();
  return py::int_(*index);
}

// --- Foreign streams ---------------------------------------------------------------------------

// A DLPack / CUDA stream number: 1 is the legacy default stream, 2 the per-thread one, others
// a cudaStream_t (0 is the legacy default stream to the CUDA runtime too).
void* native_from_number(std::intptr_t n) { return reinterpret_cast<void*>(n); }

// An int from Python (int, or a ctypes pointer's .value), else nullopt.
std::optional<std::intptr_t> as_handle(const py::handle& h) {
  if (h.is_none()) return std::intptr_t{0};  // ctypes' NULL pointer: the legacy default stream
  if (PyLong_Check(h.ptr())) return h.cast<std::intptr_t>();
  if (py::hasattr(h, "value")) return as_handle(h.attr("value"));  // ctypes.c_void_p
  if (py::hasattr(h, "__int__") && !PyFloat_Check(h.ptr())) {      // cuda.bindings' CUstream
    py::object number = py::reinterpret_steal<py::object>(PyNumber_Long(h.ptr()));
    if (!number) throw py::error_already_set();  // its __int__ raised
    return number.cast<std::intptr_t>();
  }
  return std::nullopt;
}

// A Stream over another library's: any object with the CUDA stream protocol
// (`__cuda_stream__()` -> (0, handle)), a torch.cuda.Stream (`cuda_stream`, `device`), a
// cupy.cuda.Stream (`ptr`, `device_id`) or a numba stream (`handle`). nullopt for anything
// else. The native stream's own device is used; one the object names must agree with it.
std::optional<Stream> foreign_stream(const py::handle& obj) {
  if (obj.is_none() || py::isinstance<py::str>(obj) || py::isinstance<Device>(obj) ||
      py::isinstance<Stream>(obj) || PyLong_Check(obj.ptr())) {
    return std::nullopt;
  }
  const std::string module = py::str(py::type::handle_of(obj).attr("__module__")).cast<std::string>();
  std::optional<std::intptr_t> handle;
  std::optional<Device> device;
  if (py::hasattr(obj, "__cuda_stream__")) {
    py::object v = obj.attr("__cuda_stream__");
    if (PyCallable_Check(v.ptr())) v = v();
    if (!py::isinstance<py::tuple>(v) || py::len(v) != 2 || !PyLong_Check(v[py::int_(1)].ptr())) {
      throw py::type_error("__cuda_stream__ of " + py::repr(obj).cast<std::string>() +
                           " did not return (version, handle)");
    }
    const int version = v[py::int_(0)].cast<int>();
    if (version != 0) {
      throw InvalidArgument("__cuda_stream__ of " + py::repr(obj).cast<std::string>() +
                            " is version " + std::to_string(version) + "; eventide reads version 0");
    }
    handle = v[py::int_(1)].cast<std::intptr_t>();
  } else if (py::hasattr(obj, "cuda_stream")) {  // torch.cuda.Stream, torch.cuda.ExternalStream
    handle = as_handle(obj.attr("cuda_stream"));
  } else if (module.rfind("cupy", 0) == 0 && py::hasattr(obj, "ptr")) {
    handle = as_handle(obj.attr("ptr"));
    if (py::hasattr(obj, "device_id")) {
      const int id = obj.attr("device_id").cast<int>();
      if (id >= 0) device = Device::cuda(id);  // -1: the null and per-thread singletons
    }
  } else if (module.rfind("numba", 0) == 0 && py::hasattr(obj, "handle")) {
    handle = as_handle(obj.attr("handle"));
  }
  if (!handle) return std::nullopt;
  if (!device && py::hasattr(obj, "device") && !module.empty() && module.rfind("torch", 0) == 0) {
    device = to_device(obj.attr("device"));
  }
  void* native = native_from_number(*handle);
  return device ? Stream::from_native(*device, native) : Stream::from_native(native);
}

// An eventide Stream, or another library's stream (see foreign_stream); TypeError otherwise.
Stream as_stream(const py::handle& obj, const char* where) {
  if (py::isinstance<Stream>(obj)) return obj.cast<Stream>();
  if (auto s = foreign_stream(obj)) return *s;
  throw py::type_error(std::string(where) + ": expected an eventide Stream or a CUDA stream of "
                       "another library (torch.cuda.Stream, cupy.cuda.Stream, an object with "
                       "__cuda_stream__), got " + py::repr(obj).cast<std::string>());
}

// --- Streams as context managers -----------------------------------------------------------

// `with s:` blocks live in a ContextVar (a tuple of the streams entered, innermost last), so
// that each asyncio task, which runs in its own copy of the context, has its own blocks, and
// each thread too. The C++ runtime keeps the current stream per thread; every Python entry
// point that uses the current stream first brings that up to date with the context
// (sync_current_streams: one ContextVar read when nothing changed).
PyObject* g_blocks_var = nullptr;

py::tuple current_blocks() {
  PyObject* value = nullptr;
  if (PyContextVar_Get(g_blocks_var, nullptr, &value) < 0) throw py::error_already_set();
  if (!value) return py::tuple();
  return py::reinterpret_steal<py::tuple>(value);
}

void set_blocks(const py::tuple& blocks) {
  PyObject* token = PyContextVar_Set(g_blocks_var, blocks.ptr());
  if (!token) throw py::error_already_set();
  Py_DECREF(token);
}

void sync_current_streams() {
  PyObject* value = nullptr;
  if (PyContextVar_Get(g_blocks_var, nullptr, &value) < 0) throw py::error_already_set();
  py::object blocks = py::reinterpret_steal<py::object>(value);
  // The tuple last applied on this thread, held (never released: a thread-exit destructor may
  // not touch Python), so its address cannot be reused by another tuple.
  thread_local PyObject* applied = nullptr;
  thread_local std::vector<Device> applied_devices;
  if (blocks.ptr() == applied || (!blocks && !applied)) return;
  std::vector<std::pair<Device, std::shared_ptr<detail::StreamState>>> want;
  if (blocks) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(blocks)) {
      const Stream& st = h.cast<const Stream&>();
      auto it = std::find_if(want.begin(), want.end(), [&](auto& p) { return p.first == st.device(); });
      if (it != want.end()) it->second = st.state(); else want.emplace_back(st.device(), st.state());
    }
  }
  for (Device d : applied_devices) {
    if (std::none_of(want.begin(), want.end(), [&](auto& p) { return p.first == d; })) {
      detail::exchange_current_stream(d, nullptr);
    }
  }
  applied_devices.clear();
  // Room first (MemoryError here), so that the exchange cannot leave a block's stream
  // silently not current.
  for (auto& [d, st] : want) detail::reserve_current_stream(d);
  applied_devices.reserve(want.size());
  for (auto& [d, st] : want) {
    detail::exchange_current_stream(d, st);
    applied_devices.push_back(d);
  }
  // record() with no device: the innermost block's.
  std::optional<Device> innermost;
  if (blocks) {
    auto tuple = py::reinterpret_borrow<py::tuple>(blocks);
    if (tuple.size() > 0) innermost = tuple[tuple.size() - 1].cast<const Stream&>().device();
  }
  detail::exchange_block_device(innermost);
  Py_XINCREF(blocks.ptr());
  Py_XDECREF(applied);
  applied = blocks.ptr();
}

void enter_stream(const py::object& s) {
  py::tuple old = current_blocks();
  py::tuple blocks(old.size() + 1);
  for (std::size_t i = 0; i < old.size(); ++i) blocks[i] = old[i];
  blocks[old.size()] = s;
  set_blocks(blocks);
  sync_current_streams();
}

void exit_stream(const Stream& s) {
  py::tuple old = current_blocks();
  std::size_t drop = old.size();
  for (std::size_t i = old.size(); i-- > 0;) {
    if (old[i].cast<const Stream&>() == s) {
      drop = i;
      break;
    }
  }
  if (drop == old.size()) return;  // not entered in this context
  py::tuple blocks(old.size() - 1);
  for (std::size_t i = 0, j = 0; i < old.size(); ++i) {
    if (i != drop) blocks[j++] = old[i];
  }
  set_blocks(blocks);
  sync_current_streams();
}

Tensor py_matmul(const Tensor& a, const Tensor& b) {
  sync_current_streams();
  return eventide::matmul(a, b);
}
Tensor py_add(const Tensor& a, const Tensor& b) {
  sync_current_streams();
  return eventide::add(a, b);
}
Tensor py_mul(const Tensor& a, const Tensor& b) {
  sync_current_streams();
  return eventide::mul(a, b);
}

// --- Tensors and NumPy ---------------------------------------------------------------------

// Whether the library that lent eventide some memory lets others write it. eventide's ops write
// only the new tensors they return, never their inputs, so read-only memory is an input like any
// other; what must not happen is that eventide hands it on as writable (__dlpack__).
enum class Access { writable, read_only };

// Memory eventide did not allocate: another library's, with the access it allows.
class LentStorage : public detail::Storage {
 public:
  Access access() const noexcept { return access_; }

 protected:
  LentStorage(void* data, std::size_t bytes, Device device, Access access)
      : Storage(data, bytes, device), access_(access) {}

 private:
  Access access_;
};

// eventide's own memory is writable; lent memory as its lender said.
Access access_of(const detail::Storage& storage) {
  const auto* lent = dynamic_cast<const LentStorage*>(&storage);
  return lent ? lent->access() : Access::writable;
}

class PyStorage final : public LentStorage {
 public:
  PyStorage(void* data, std::size_t bytes, Device device, Access access, py::object owner)
      : LentStorage(data, bytes, device, access), owner_(std::move(owner)) {}

 private:
  PyHandle owner_;
};

// A tensor on memory eventide did not allocate; no op produced it, so it is ready at once.
Tensor wrap(Shape shape, DType dtype, Device device, detail::Ref<detail::Storage> storage) {
  return Tensor(std::make_shared<detail::TensorState>(std::move(shape), dtype, device,
                                                      std::move(storage)));
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
  throw InvalidArgument("NumPy has no bfloat16: convert the tensor on the device first");
}

std::optional<DType> from_numpy_dtype(const py::dtype& dt) {
  std::string n = py::str(dt.attr("name")).cast<std::string>();
  if (n == "float32") return DType::f32;
  if (n == "float64") return DType::f64;
  if (n == "int32") return DType::i32;
  if (n == "int64") return DType::i64;
  if (n == "float16") return DType::f16;
  return std::nullopt;
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

// A read-only NumPy view of a CPU tensor's memory (kept alive by the array), or a copy of a
// device tensor's. Waits for the producer.
py::array to_numpy(const Tensor& t) {
  wait_tensor(t);
  const auto& s = *t.state();
  py::dtype dt = numpy_dtype(s.dtype);
  std::vector<py::ssize_t> shape(s.shape.begin(), s.shape.end());
  if (s.device.is_cpu()) {
    auto* keep = new std::shared_ptr<detail::TensorState>(t.state());
    py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<detail::TensorState>*>(p); });
    py::array arr(dt, shape, c_strides(s.shape, itemsize(s.dtype)), s.storage->data(), base);
    arr.attr("setflags")("write"_a = false);
    return arr;
  }
  py::array arr(dt, shape);
  {
    py::gil_scoped_release release;
    detail::Runtime::get().context(s.device).backend().kernels().download(s, arr.mutable_data());
  }
  return arr;
}

// `arr` in the machine's byte order: a copy where it is not (a big-endian array's values would
// otherwise be read as little-endian ones).
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
    std::size_t bytes = static_cast<std::size_t>(input.nbytes());
    const Access access = input.writeable() ? Access::writable : Access::read_only;
    detail::Ref<detail::Storage> storage(new PyStorage(data, bytes, device, access, input));
    return wrap(std::move(shape), *dtype, device, std::move(storage));
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
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = ops::float_to_bf16(src[i]);
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

// --- DLPack --------------------------------------------------------------------------------

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

DLDevice dl_device(Device d) {
  return d.is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, d.index()};
}

// What an exported capsule owns: the tensor (its memory) and the shape arrays.
struct Export {
  std::shared_ptr<detail::TensorState> keep;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
};

void fill_dl_tensor(Export& ex, DLTensor& t) {
  const auto& s = *ex.keep;
  t.data = s.storage->data();
  t.device = dl_device(s.device);
  t.ndim = static_cast<std::int32_t>(s.shape.size());
  t.dtype = dl_dtype(s.dtype);
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
  ex->keep = t.state();
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

py::capsule dlpack_method(const Tensor& t, const py::object& stream, const py::object& max_version,
                          const py::object& dl_device_obj, const py::object& copy) {
  // The array API standard: the stream is an int or None, anything else is a TypeError.
  if (!stream.is_none() && (!PyLong_Check(stream.ptr()) || PyBool_Check(stream.ptr()))) {
    throw py::type_error("__dlpack__: stream must be an int or None, got " +
                         py::repr(stream).cast<std::string>());
  }
  const auto& s = *t.state();
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
    DLDevice have = dl_device(s.device);
    if (want.first != have.device_type || want.second != have.device_id) {
      throw py::buffer_error("__dlpack__: cannot export a tensor on " + s.device.str() +
                             " to another device");
    }
  }
  if (s.device.is_cpu() && !stream.is_none()) {
    throw py::buffer_error("__dlpack__: stream must be None for a cpu tensor");
  }
  bool versioned = false;
  if (!max_version.is_none()) {
    auto v = int_pair(max_version, "max_version");
    versioned = v.first >= 1;
  }
  const bool copied = !copy.is_none() && copy.cast<bool>();
  // Read-only memory (lent so by its owner) stays read-only: a versioned capsule says so; an
  // unversioned one cannot, and is refused, as NumPy refuses a read-only array's. (Before the
  // handshake below, which changes the consumer's stream.)
  const bool read_only = !copied && access_of(*s.storage) == Access::read_only;
  if (read_only && !versioned) {
    throw py::buffer_error("__dlpack__: the tensor's memory is read-only, which an unversioned "
                           "DLPack capsule cannot say; pass max_version=(1, 0), or copy=True");
  }
  if (!s.device.is_cpu() && !stream.is_none()) {
    // The handshake: the consumer's stream waits, on the GPU, for the tensor's producer
    // (-1: the consumer asks for no ordering). A producer still held on the host (waiting for
    // a UserEvent) cannot be waited for on the GPU safely: the host waits for it instead.
    std::intptr_t number = stream.cast<std::intptr_t>();
    if (auto producer = s.producer(); producer && !producer->launched()) wait_tensor(t);
    if (number != -1) {
      sync_current_streams();
      Stream consumer = Stream::from_native(s.device, native_from_number(number));
      Event e(s.device);
      e.record(t);
      consumer.wait(e);
    }
  } else {
    // The consumer reads the memory as soon as it has the capsule: the producer must be done.
    wait_tensor(t);
  }
  Tensor out = t;
  if (copied) {
    sync_current_streams();
    out = eventide::from_host(s.storage->data(), s.shape, s.dtype, s.device);
    wait_tensor(out);
  }
  return export_dlpack(out, versioned,
                       (read_only ? kDLPackFlagReadOnly : 0) | (copied ? kDLPackFlagIsCopied : 0));
}

// Memory imported through DLPack: released through the producer's deleter.
class DlpackStorage final : public LentStorage {
 public:
  DlpackStorage(void* data, std::size_t bytes, Device device, Access access, void* managed,
                bool versioned)
      : LentStorage(data, bytes, device, access), managed_(managed), versioned_(versioned) {}
  ~DlpackStorage() override {
    if (!python_alive()) return;  // the producer's deleter may need the interpreter
    // Not under a runtime lock (runtime_lock.hpp): the deleter takes the GIL.
    if (versioned_) {
      detail::run_when_unlocked(&release<DLManagedTensorVersioned>, managed_);
    } else {
      detail::run_when_unlocked(&release<DLManagedTensor>, managed_);
    }
  }

 private:
  template <class Managed>
  static void release(void* managed) {
    if (!python_alive()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    auto* m = static_cast<Managed*>(managed);
    if (m->deleter) m->deleter(m);
    PyGILState_Release(gil);
  }

  void* managed_;
  bool versioned_;
};

Tensor from_dlpack(const py::object& obj) {
  py::object cap = obj;
  if (py::hasattr(obj, "__dlpack__")) {
    // For GPU memory, the producer makes our current stream of that device wait for it.
    py::object stream = py::none();
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      if (dev.first == kDLCUDA) {
        sync_current_streams();
        Device d = Device::cuda(dev.second);
        if (!is_available(d)) throw InvalidArgument("from_dlpack: " + d.str() + " is not available");
        stream = py::int_(reinterpret_cast<std::intptr_t>(Stream::current(d).native_handle()));
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
  Access access = Access::writable;  // (an unversioned capsule cannot say read-only)
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
  Device device;
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) {
    device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
    device = Device::cuda(t.device.device_id);
  } else {
    throw InvalidArgument("from_dlpack: unsupported DLPack device type " +
                          std::to_string(t.device.device_type));
  }
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
  std::size_t bytes = static_cast<std::size_t>(numel(shape)) * itemsize(*dtype);
  // Ownership moves to the storage: the capsule is marked consumed.
  PyCapsule_SetName(cap.ptr(), versioned ? "used_dltensor_versioned" : "used_dltensor");
  detail::Ref<detail::Storage> storage(
      new DlpackStorage(data, bytes, device, access, managed, versioned));
  Tensor out = wrap(std::move(shape), *dtype, device, std::move(storage));
  if (!device.is_cpu()) {
    // The producer ordered our current stream after its work; an op there stands for that
    // work, so that every stream that uses the tensor is ordered after it too.
    auto stream = detail::Runtime::get().current_stream(device);
    stream->launch("from_dlpack", {}, {out.state().get()}, detail::Callback());
  }
  return out;
}

// --- Reprs ---------------------------------------------------------------------------------

std::string event_repr(const Event& e) {
  std::string s = e.str();  // "<Event pending on cpu, 2 ops>"
  return "<eventide." + s.substr(1);
}

// "<eventide.Tensor (512, 512) float32 on cpu, ready>", in the style of the events' reprs.
std::string tensor_repr(const Tensor& t) {
  if (!t.defined()) return "<eventide.Tensor undefined>";
  const auto& s = *t.state();
  auto producer = s.producer();
  const char* status = !producer || producer->done() ? (producer && producer->error() ? "failed" : "ready")
                                                     : "pending";
  return "<eventide.Tensor " + py::repr(to_tuple(s.shape)).cast<std::string>() + " " + py_name(s.dtype) +
         " on " + s.device.str() + ", " + status + ">";
}

// --- Fast paths ------------------------------------------------------------------------------
//
// pybind11's argument dispatch costs ~200 ns a call on a slow core: more than the whole of
// poll() in C++. The calls made in tight loops (poll, query, completed, record of a tensor,
// wait on a finished event) get plain CPython entry points; anything unusual falls back to
// the pybind11 overloads (kept as _record and _wait).

template <class T>
T* self_as(PyObject* self) {
  return &py::handle(self).cast<T&>();
}

PyObject* fail_to_python() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (...) {
    py::object exc = to_python_exception(std::current_exception());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  }
  return nullptr;
}

// Calls the pybind11 overload `name` of `self`. The bound method is a raw reference, not a
// py::object: if the interpreter ends this thread inside the call (exit; the forced unwind of
// pthread_exit), no destructor may release it, since the thread no longer holds the GIL (the
// method object, its last reference gone, would be freed without it: a crash at exit).
PyObject* call_slow_path(PyObject* self, const char* name, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  PyObject* method = PyObject_GetAttrString(self, name);
  if (!method) return nullptr;
  PyObject* result = PyObject_Vectorcall(method, args, static_cast<size_t>(nargs), kwnames);
  Py_DECREF(method);
  return result;
}

PyObject* fast_poll(PyObject* self, PyObject*) {
  try {
    return PyBool_FromLong(self_as<Event>(self)->poll());
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_completed(PyObject* self, void*) { return fast_poll(self, nullptr); }

PyObject* fast_record(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs == 0 && !kwnames) {  // record(): the current stream
      sync_current_streams();
      self_as<Event>(self)->record();
      Py_RETURN_NONE;
    }
    if (nargs == 1 && !kwnames) {
      py::detail::make_caster<Tensor> tensor;
      if (tensor.load(args[0], /*convert=*/false)) {
        self_as<Event>(self)->record(py::detail::cast_op<const Tensor&>(tensor));
        Py_RETURN_NONE;
      }
    }
    return call_slow_path(self, "_record", args, nargs, kwnames);
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs == 0 && !kwnames) {
      Event* e = self_as<Event>(self);
      if (e->status() == EventStatus::finished) Py_RETURN_TRUE;  // the common "already done"
    }
    return call_slow_path(self, "_wait", args, nargs, kwnames);
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_synchronize(PyObject* self, PyObject*) {
  try {
    Event* e = self_as<Event>(self);
    if (e->status() != EventStatus::finished) wait_event(*e, py::none());
    Py_RETURN_NONE;
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

void install_fast_paths(py::handle cls) {
  static PyMethodDef poll_def{"poll", &fast_poll, METH_NOARGS,
                              "True once all tied work has finished (never blocks)."};
  static PyMethodDef query_def{"query", &fast_poll, METH_NOARGS, "PyTorch's spelling of poll()."};
  static PyMethodDef record_def{"record", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_record)),
                                METH_FASTCALL | METH_KEYWORDS,
                                "record(obj=None): tie the event to the op that produced a tensor, "
                                "or to all work so far on a stream (default: the current stream)."};
  static PyMethodDef wait_def{"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_wait)),
                              METH_FASTCALL | METH_KEYWORDS,
                              "wait(timeout=None) -> bool: block until finished (True) or timeout "
                              "seconds pass (False); raises the error of failed work."};
  static PyMethodDef synchronize_def{"synchronize", &fast_synchronize, METH_NOARGS,
                                     "PyTorch's spelling of wait()."};
  static PyGetSetDef completed_def{"completed", &fast_completed, nullptr,
                                   "True once all tied work has finished.", nullptr};
  // The pybind11 overloads stay reachable for the cases the fast paths hand on (their error
  // messages keep the public names).
  cls.attr("_record") = cls.attr("record");
  cls.attr("_wait") = cls.attr("wait");
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef* def : {&poll_def, &query_def, &record_def, &wait_def, &synchronize_def}) {
    py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!descr || PyObject_SetAttrString(cls.ptr(), def->ml_name, descr.ptr()) != 0) {
      throw py::error_already_set();
    }
  }
  py::object getset = py::reinterpret_steal<py::object>(PyDescr_NewGetSet(type, &completed_def));
  if (!getset || PyObject_SetAttrString(cls.ptr(), "completed", getset.ptr()) != 0) {
    throw py::error_already_set();
  }
}

// --- Profiling -------------------------------------------------------------------------------

py::object optional_float(const std::optional<double>& v) {
  return v ? py::object(py::float_(*v)) : py::object(py::none());
}

py::list ops_list(const Profile& p) {
  py::list out;
  for (const ProfiledOp& op : p.ops()) {
    py::dict d("id"_a = op.id, "name"_a = op.name, "stream"_a = op.stream, "device"_a = op.device,
               "seq"_a = op.seq, "detail"_a = op.detail, "is_wait"_a = op.is_wait,
               "is_marker"_a = op.is_marker,
               "finished"_a = op.finished, "start_us"_a = optional_float(op.start_us),
               "end_us"_a = optional_float(op.end_us));
    d["duration_us"] = op.start_us && op.end_us ? py::object(py::float_(*op.end_us - *op.start_us))
                                                : py::object(py::none());
    d["error"] = op.error.empty() ? py::object(py::none()) : py::object(py::str(op.error));
    d["waits_for"] = py::cast(op.waits_for);
    out.append(std::move(d));
  }
  return out;
}

py::list records_list(const Profile& p) {
  py::list out;
  for (const ProfiledRecord& r : p.records()) {
    out.append(py::dict("event"_a = r.event, "event_name"_a = r.event_name,
                        "op"_a = r.op ? py::object(py::int_(r.op)) : py::object(py::none()),
                        "at_us"_a = r.at_us));
  }
  return out;
}

py::list host_waits_list(const Profile& p) {
  py::list out;
  for (const ProfiledHostWait& h : p.host_waits()) {
    out.append(py::dict("event"_a = h.event, "thread"_a = h.thread, "start_us"_a = h.start_us,
                        "end_us"_a = h.end_us, "finished"_a = h.finished, "ops"_a = h.ops));
  }
  return out;
}

py::list callbacks_list(const Profile& p) {
  py::list out;
  for (const ProfiledCallback& c : p.callbacks()) {
    out.append(py::dict("event"_a = c.event ? py::object(py::int_(c.event)) : py::object(py::none()),
                        "thread"_a = c.thread, "start_us"_a = c.start_us, "end_us"_a = c.end_us));
  }
  return out;
}

// A str or os.PathLike.
std::string to_path(const py::object& path) {
  return py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
}

}  // namespace

PYBIND11_MODULE(_eventide, m) {
  m.doc() = "eventide: asynchronous device work and events (C++ core)";
  g_blocks_var = PyContextVar_New("eventide_stream_blocks", nullptr);
  if (!g_blocks_var) throw py::error_already_set();
  m.add_object("_stream_blocks", py::handle(g_blocks_var));
  register_exceptions(m);

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
      .def_property_readonly("name", [](DType d) { return py_name(d); })
      .def_property_readonly("itemsize", [](DType d) { return itemsize(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); });
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::f16, DType::bf16}) {
    m.attr(py_name(d)) = py::cast(d);
  }

  // --- Device ---
  py::class_<Device>(m, "Device", "A device: 'cpu' or 'cuda:N'.")
      .def(py::init([](const py::object& spec) { return device_or_default(spec); }), "spec"_a)
      .def_property_readonly("type", [](Device d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index", [](Device d) { return d.index(); })
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

  // --- Events ---
  py::class_<Event> event_class(m, "Event", "An event tied to device work (see the package docstring).");
  event_class
      .def(py::init([](const py::object& device, bool enable_timing) {
             return Event(to_device(device), EventOptions{enable_timing});
           }),
           "device"_a = py::none(), "enable_timing"_a = true)
      .def("record",
           [](Event& e, const py::object& obj) {
             if (obj.is_none()) {
               sync_current_streams();
               e.record();
             } else if (py::isinstance<Tensor>(obj)) {
               e.record(obj.cast<const Tensor&>());
             } else {
               e.record(as_stream(obj, "Event.record"));
             }
           },
           "obj"_a = py::none(),
           "record(obj=None): tie the event to the op that produced a tensor, or place a marker "
           "at the current end of a stream (an eventide Stream or another library's, e.g. "
           "torch.cuda.current_stream()); None: the current stream.")
      .def("wait", &wait_event, "timeout"_a = py::none(),
           "Block until finished (True) or `timeout` seconds pass (False). Raises the error of "
           "failed work, EventStateError if the event is empty.")
      .def_property_readonly("device", &Event::device)
      .def_property_readonly("status", [](const Event& e) { return std::string(name(e.status())); })
      .def_property_readonly("enable_timing", &Event::timing_enabled)
      .def_property_readonly("error", [](const Event& e) -> py::object {
        auto err = e.error();
        return err ? to_python_exception(err) : py::none();
      })
      .def("time_elapsed", [](const Event& e) { return e.time_elapsed().count(); },
           "Device time of the tied work, in microseconds (float).")
      .def("elapsed_time", [](const Event& e, const Event& end) { return e.elapsed_time(end).count(); },
           "end"_a, "Milliseconds from this event's completion to `end`'s (PyTorch's meaning).")
      .def("reset", &Event::reset, "Back to empty. EventStateError while pending.")
      .def("add_callback",
           [](Event& e, const py::object& fn) { e.add_callback(to_callback(fn, "add_callback")); },
           "fn"_a, "Call fn() once when the event finishes, on the runtime's callback thread.")
      // For the package's asyncio support: a cancelled await takes its callback back.
      .def("_add_callback",
           [](Event& e, const py::object& fn) {
             return e.state()->add_callback(to_callback(fn, "add_callback"));
           },
           "fn"_a, "add_callback(fn), returning an id for _remove_callback().")
      .def("_remove_callback",
           [](Event& e, std::uint64_t id) { return e.state()->remove_callback(id); }, "id"_a,
           "Takes back a callback _add_callback() added: True if it will never run, False if it "
           "has been handed over to run (it runs once) or the id is unknown.")
      .def("__repr__", &event_repr)
      .def("__eq__", [](const Event& a, const py::object& b) {
        return py::isinstance<Event>(b) && a == b.cast<const Event&>();
      })
      .def("__hash__", [](const Event& e) { return std::hash<const void*>{}(e.state().get()); });
  install_fast_paths(event_class);

  py::class_<UserEvent, Event>(m, "UserEvent", "An event finished by host code: set() or fail(exc).",
                               py::custom_type_setup(&setup_user_event_type))
      .def(py::init([](const py::object& device, bool enable_timing) {
             return UserEvent(to_device(device), EventOptions{enable_timing});
           }),
           "device"_a = py::none(), "enable_timing"_a = true)
      .def("set", &UserEvent::set)
      .def("fail", [](UserEvent& u, py::object exc) {
        if (PyExceptionClass_Check(exc.ptr())) exc = exc();
        if (!PyExceptionInstance_Check(exc.ptr())) {
          throw InvalidArgument("UserEvent.fail: expected an exception, got " +
                                py::repr(exc).cast<std::string>());
        }
        u.fail(std::make_exception_ptr(PythonError(exc)));
      }, "exception"_a)
      .def("reset", &UserEvent::reset)
      .def("__repr__", &event_repr);

  // --- Streams ---
  py::class_<Stream>(m, "Stream", "An in-order queue of device work.")
      .def(py::init([](const py::object& device) {
             if (py::isinstance<Stream>(device)) return device.cast<Stream>();
             if (auto native = foreign_stream(device)) return *native;
             return Stream(device_or_default(device));
           }),
           "device"_a = py::none(),
           "Stream(device=None): a new stream; Stream(torch_stream) or Stream(obj with "
           "__cuda_stream__): one over that stream (not owned)")
      .def_static("from_native",
                  [](const py::object& a, const py::object& b) {
                    // from_native(handle) or from_native(device, handle): the device is the
                    // native stream's own unless given.
                    const py::object& handle_obj = b.is_none() ? a : b;
                    auto handle = as_handle(handle_obj);
                    if (!handle || py::isinstance<py::bool_>(handle_obj)) {
                      throw py::type_error("Stream.from_native: the handle must be an int (a "
                                           "cudaStream_t), got " + py::repr(handle_obj).cast<std::string>());
                    }
                    void* native = native_from_number(*handle);
                    return b.is_none() ? Stream::from_native(native)
                                       : Stream::from_native(device_or_default(a), native);
                  },
                  "device_or_handle"_a, "handle"_a = py::none(),
                  "from_native(handle) or from_native(device, handle): a stream over a native "
                  "cudaStream_t (an int; 0 or 1: the legacy default stream, 2: the calling "
                  "thread's per-thread default stream), not owned.")
      .def_property_readonly("native_handle", [](const Stream& s) {
        return reinterpret_cast<std::uintptr_t>(s.native_handle());
      })
      .def_property_readonly("__cuda_stream__", [](const Stream& s) -> py::object {
        // The CUDA stream protocol, for the libraries that take streams through it. A cpu
        // stream has none: the attribute is missing (hasattr() is False).
        if (!s.native_handle()) {
          throw py::attribute_error(s.str() + " has no CUDA stream (__cuda_stream__)");
        }
        const auto handle = reinterpret_cast<std::uintptr_t>(s.native_handle());
        return py::cpp_function([handle] { return py::make_tuple(0, handle); });
      })
      .def_property_readonly("device", &Stream::device)
      .def_property_readonly("id", &Stream::id)
      .def("wait",
           [](Stream& s, const py::object& what) {
             if (py::isinstance<Event>(what)) {
               s.wait(what.cast<const Event&>());
             } else {
               s.wait_stream(as_stream(what, "Stream.wait"));
             }
           },
           "event_or_stream"_a,
           "Later work on this stream waits for an event, or for all work so far on a stream.")
      .def("wait_event", &Stream::wait_event, "event"_a)
      .def("wait_stream",
           [](Stream& s, const py::object& other) { s.wait_stream(as_stream(other, "Stream.wait_stream")); },
           "stream"_a)
      .def("record_event",
           [](const Stream& s, const py::object& event) -> py::object {
             if (event.is_none()) return py::cast(s.record_event());
             if (!py::isinstance<Event>(event)) {
               throw py::type_error("record_event: expected an eventide Event or None, got " +
                                    py::repr(event).cast<std::string>());
             }
             event.cast<Event&>().record(s);
             return event;  // the same object, as in PyTorch
           },
           "event"_a = py::none())
      .def("query", &Stream::query)
      .def("synchronize", [](const Stream& s) { synchronize_streams({s.state()}); })
      .def_property_readonly("error", [](const Stream& s) -> py::object {
        auto err = s.error();
        return err ? to_python_exception(err) : py::none();
      })
      .def("__enter__", [](const py::object& s) { enter_stream(s); return s; })
      .def("__exit__", [](const Stream& s, const py::args&) { exit_stream(s); })
      .def("__repr__", [](const Stream& s) { return "<eventide.Stream " + s.str() + ">"; })
      .def("__eq__", [](const Stream& a, const py::object& b) {
        return py::isinstance<Stream>(b) && a == b.cast<const Stream&>();
      })
      .def("__hash__", [](const Stream& s) { return std::hash<const void*>{}(s.state().get()); });

  m.def("current_stream", [](const py::object& d) {
          sync_current_streams();
          return Stream::current(device_or_default(d));
        },
        "device"_a = py::none());
  m.def("default_stream", [](const py::object& d) { return Stream::default_stream(device_or_default(d)); },
        "device"_a = py::none());

  // --- Tensors ---
  py::class_<Tensor>(m, "Tensor", "A dense array on a device; ops on it are asynchronous.")
      .def_property_readonly("shape", [](const Tensor& t) { return to_tuple(t.shape()); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("ready", &Tensor::ready)
      .def_property_readonly("error", [](const Tensor& t) -> py::object {
        auto err = t.error();
        return err ? to_python_exception(err) : py::none();
      })
      .def("numel", &Tensor::numel)
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
           "fn"_a)
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
      .def("__dlpack_device__", [](const Tensor& t) {
        DLDevice d = dl_device(t.device());
        return py::make_tuple(d.device_type, d.device_id);
      })
      .def("to", [](const Tensor& t, const py::object& d) {
             sync_current_streams();
             return t.to(device_or_default(d));
           },
           "device"_a)
      .def("__matmul__", &py_matmul)
      .def("__add__", &py_add)
      .def("__mul__", &py_mul)
      .def("__repr__", &tensor_repr);

  auto creation = [&m](const char* name, Tensor (*fn)(Shape, DType, Device), const char* doc) {
    m.def(name,
          [fn, name](const py::args& shape, const py::object& dtype, const py::object& device) {
            sync_current_streams();
            return fn(to_shape(shape, name), to_dtype(dtype), device_or_default(device));
          },
          "dtype"_a = py::none(), "device"_a = py::none(), doc);
  };
  creation("empty", &eventide::empty, "An uninitialized tensor: empty(2, 3) or empty((2, 3)).");
  creation("zeros", &eventide::zeros, "A tensor of zeros.");
  creation("ones", &eventide::ones, "A tensor of ones.");
  creation("rand", &eventide::rand, "Uniform random numbers in [0, 1).");
  creation("randn", &eventide::randn, "Standard normal random numbers.");
  m.def("full",
        [](const py::object& shape, double value, const py::object& dtype, const py::object& device) {
          sync_current_streams();
          return eventide::full(to_shape(py::make_tuple(shape), "full"), value, to_dtype(dtype),
                                device_or_default(device));
        },
        "shape"_a, "fill_value"_a, "dtype"_a = py::none(), "device"_a = py::none());
  m.def("tensor", &tensor_from_data, "data"_a, "dtype"_a = py::none(), "device"_a = py::none(),
        "A copy of `data` (a list, a NumPy array, anything np.asarray takes) on the device.");
  m.def("from_numpy", &from_numpy, "array"_a, "device"_a = py::none(),
        "A tensor on the array's memory (no copy on cpu where the layout allows; the array is kept "
        "alive), else a copy.");
  m.def("from_dlpack", &from_dlpack, "x"_a, "A tensor sharing the memory of a DLPack producer.");
  m.def("matmul", &py_matmul, "a"_a, "b"_a, "a @ b; asynchronous, on the current stream.");
  m.def("add", &py_add, "a"_a, "b"_a, "a + b, elementwise.");
  m.def("mul", &py_mul, "a"_a, "b"_a, "a * b, elementwise.");
  m.def("manual_seed", [](std::uint64_t seed, const py::object& device) {
    auto d = to_device(device);
    d ? eventide::manual_seed(seed, *d) : eventide::manual_seed(seed);
  }, "seed"_a, "device"_a = py::none());

  // --- Waiting and devices ---
  m.def("_wait_all_events", &wait_all_events, "events"_a, "timeout"_a = py::none());
  m.def("wait_any", &wait_any_events, "events"_a, "timeout"_a = py::none(),
        "Index of a finished event (the lowest), or None on timeout.");
  m.def("synchronize",
        [](const py::object& device) {
          std::vector<Device> which;
          if (auto d = to_device(device)) which.push_back(*d); else which = devices();
          for (Device d : which) synchronize_streams(detail::Runtime::get().context(d).live_streams());
        },
        "device"_a = py::none(), "Wait for all work on the device (every device if None).");
  m.def("_deferred_releases", &detail::deferred_releases,
        "How many releases of Python objects waited for their thread to let go of the "
        "runtime's locks (tests of the rule in core/runtime_lock.hpp).");
  // os.fork(): waits (GIL released: a running op's body may need it) for running CPU ops, up
  // to detail::kForkGrace, before the interpreter forks (the runtime's pthread_atfork
  // handlers do the rest). Registered with os.register_at_fork by the package.
  m.def("_pause_for_fork", [] {
    py::gil_scoped_release unlocked;
    detail::Runtime::pause_for_fork();
  });
  m.def("_resume_after_fork", [] { detail::Runtime::resume_after_fork_pause(); });
  m.def("default_device", &default_device);
  m.def("devices", &devices);
  m.def("is_available", [](const py::object& d) {
    try {
      auto dev = to_device(d);
      return dev && is_available(*dev);
    } catch (const Error&) {
      return false;
    }
  });
  m.def("device_info", [](const py::object& d) {
    DeviceInfo info = device_info(device_or_default(d));
    return py::dict("device"_a = info.device, "name"_a = info.name, "description"_a = info.description);
  }, "device"_a = py::none());
  m.def("set_allow_tf32", &set_allow_tf32, "allow"_a,
        "Let f32 matmul on GPUs use TF32 tensor cores (off by default, as in PyTorch).");
  m.def("allow_tf32", &allow_tf32);
  m.attr("__version__") = std::string(version());

  // --- Profiling ---
  py::class_<Profile>(m, "Profile",
                      "What a profiler recorded: ops, event records, host waits, callbacks. Times "
                      "are microseconds from the profile's start, on the host's clock.")
      .def_property_readonly("ops", &ops_list,
                             "One dict per op: id, name, stream, device, seq, detail, is_wait, is_marker, "
                             "finished, start_us, end_us, duration_us, error, waits_for.")
      .def_property_readonly("records", &records_list, "One dict per event record: event, event_name, op, at_us.")
      .def_property_readonly("host_waits", &host_waits_list,
                             "One dict per host wait: event, thread, start_us, end_us, finished, ops.")
      .def_property_readonly("callbacks", &callbacks_list, "One dict per callback run: event, thread, start_us, end_us.")
      .def_property_readonly("duration_us", &Profile::duration_us)
      .def("chrome_trace", &Profile::chrome_trace, py::call_guard<py::gil_scoped_release>(),
           "The Chrome trace (JSON text) that Perfetto and chrome://tracing load.")
      .def("export_chrome_trace",
           [](const Profile& p, const py::object& path) {
             std::string where = to_path(path);
             py::gil_scoped_release release;
             p.export_chrome_trace(where);
           },
           "path"_a, "Write the Chrome trace (JSON) to `path`.")
      .def("timeline_html", &Profile::timeline_html, py::call_guard<py::gil_scoped_release>(),
           "A self-contained HTML page with the timeline as SVG.")
      .def("export_timeline",
           [](const Profile& p, const py::object& path) {
             std::string where = to_path(path);
             py::gil_scoped_release release;
             p.export_timeline(where);
           },
           "path"_a, "Write the timeline page (HTML) to `path`.")
      .def("__repr__", [](const Profile& p) { return "<eventide." + p.str().substr(1); });

  py::class_<Profiler>(m, "Profiler",
                       "Records device work from its creation until stop(). One at a time per "
                       "process. ev.profile() is the context manager over it.")
      .def(py::init<>())
      .def("stop",
           [](Profiler& profiler, const py::object& timeout) {
             auto seconds = parse_timeout(timeout);
             // A year stands for "as long as it takes" (nanoseconds would overflow beyond ~292).
             constexpr double kLongest = 365.0 * 24 * 3600;
             auto limit = seconds ? std::chrono::duration_cast<nanoseconds>(
                                        std::chrono::duration<double>(std::min(*seconds, kLongest)))
                                  : nanoseconds(Profiler::kDefaultStopTimeout);
             // The GIL is let go and taken back by hand, not by gil_scoped_release: at
             // interpreter exit, taking it back ends a daemon thread by unwinding its stack
             // (pthread_exit), and a guard's destructor taking it again during that unwind
             // would be std::terminate. Once Python is going away, the thread sleeps instead.
             struct Interrupted {};
             PyThreadState* thread = PyEval_SaveThread();
             auto take_gil = [&thread] {
               if (!python_alive()) {
                 for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
               }
               PyEval_RestoreThread(thread);
             };
             std::optional<Profile> profile;
             try {
               // Ctrl-C ends the wait: the signal handlers run between its slices.
               profile = profiler.stop(limit, [&] {
                 take_gil();
                 const bool signalled = PyErr_CheckSignals() != 0;  // the error stays set
                 thread = PyEval_SaveThread();
                 if (signalled) throw Interrupted{};
               });
             } catch (abi::__forced_unwind&) {
               throw;
             } catch (const Interrupted&) {
               take_gil();
               throw py::error_already_set();
             } catch (...) {
               take_gil();
               throw;
             }
             take_gil();
             return std::move(*profile);
           },
           "timeout"_a = py::none(),
           "Stop recording and return the Profile once the recorded work has finished and its "
           "times are known (at most `timeout` seconds, default 10; work unfinished then is marked "
           "so). Releases the GIL. EventStateError if already stopped.");

  // At interpreter exit (after non-daemon threads have finished): no runtime thread may touch
  // Python any more; then the runtime stops, with the GIL released so that a callback that is
  // running can finish.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    mark_python_exiting();
    py::gil_scoped_release release;
    detail::Runtime::get().shutdown();
  }));
}

}  // namespace eventide::python
