// Streams: eventide's and other libraries' (through the CUDA stream protocol), `with stream:`
// blocks, and synchronize.
#include <memory>
#include <unordered_map>
#include <vector>

#include "bindings.hpp"

namespace eventide::python {

using namespace pybind11::literals;
using std::chrono::nanoseconds;

namespace {

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
// PyTorch's own torch.cuda.Stream objects, the ones record(torch_stream) sees in a loop: their
// type once seen, and the wrapper of each native handle. torch never destroys these streams
// (they come from its pools for the life of the process), so a handle always names the same
// stream; ExternalStream, whose handle the user may destroy and reuse, is another type and is
// not kept. Under the GIL; bounded (emptied when full); leaked at exit, as the runtime is.
PyTypeObject* g_torch_stream_type = nullptr;
std::unordered_map<std::intptr_t, Stream>* g_torch_streams = nullptr;
constexpr std::size_t kTorchStreamsKept = 256;

void keep_torch_stream(const py::handle& obj, std::intptr_t handle, const Stream& s) {
  PyTypeObject* type = Py_TYPE(obj.ptr());
  const std::string module = py::str(py::type::handle_of(obj).attr("__module__")).cast<std::string>();
  if (module != "torch.cuda.streams" || std::string(type->tp_name).find("ExternalStream") != std::string::npos ||
      std::string(type->tp_name) != "Stream") {
    return;
  }
  if (!g_torch_streams) g_torch_streams = new std::unordered_map<std::intptr_t, Stream>();
  if (g_torch_streams->size() >= kTorchStreamsKept) g_torch_streams->clear();
  g_torch_stream_type = type;
  g_torch_streams->insert_or_assign(handle, s);
}

}  // namespace

std::optional<Stream> known_torch_stream(PyObject* obj) {
  if (!g_torch_stream_type || Py_TYPE(obj) != g_torch_stream_type) return std::nullopt;
  PyObject* attr = PyObject_GetAttrString(obj, "cuda_stream");
  if (!attr) {
    PyErr_Clear();
    return std::nullopt;
  }
  const std::intptr_t handle = PyLong_Check(attr) ? static_cast<std::intptr_t>(PyLong_AsSsize_t(attr)) : -1;
  Py_DECREF(attr);
  if (handle == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  auto it = g_torch_streams->find(handle);
  if (it == g_torch_streams->end()) return std::nullopt;
  return it->second;
}

namespace {

std::optional<Stream> foreign_stream(const py::handle& obj) {
  if (auto known = known_torch_stream(obj.ptr())) return known;
  if (obj.is_none() || py::isinstance<py::str>(obj) || py::isinstance<Device>(obj) ||
      py::isinstance<Stream>(obj) || PyLong_Check(obj.ptr())) {
    return std::nullopt;
  }
  const std::string module = py::str(py::type::handle_of(obj).attr("__module__")).cast<std::string>();
  // An event of those libraries has the same attributes as their streams (CuPy's `ptr`,
  // Numba's `handle`): only a class named as a stream is one.
  const std::string type_name = py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
  const bool named_stream = type_name.find("Stream") != std::string::npos;
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
  } else if (module.rfind("cupy", 0) == 0 && named_stream && py::hasattr(obj, "ptr")) {
    handle = as_handle(obj.attr("ptr"));
    if (py::hasattr(obj, "device_id")) {
      const int id = obj.attr("device_id").cast<int>();
      if (id >= 0) device = Device::cuda(id);  // -1: the null and per-thread singletons
    }
  } else if (module.rfind("numba", 0) == 0 && named_stream && py::hasattr(obj, "handle")) {
    handle = as_handle(obj.attr("handle"));
  }
  if (!handle) return std::nullopt;
  if (!device && py::hasattr(obj, "device") && !module.empty() && module.rfind("torch", 0) == 0) {
    device = to_device(obj.attr("device"));
  }
  void* native = native_from_number(*handle);
  Stream s = device ? Stream::from_native(*device, native) : Stream::from_native(native);
  keep_torch_stream(obj, *handle, s);
  return s;
}

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

// The guards of the blocks last applied on this thread, innermost last: bringing the thread up
// to date unwinds them all and enters the running context's blocks anew (StreamGuard does
// what a block means: the stream current for its device, and its device the one record()
// without a device uses). Only when the blocks changed: the tuple last applied is compared
// by identity, and held (never released: a thread-exit destructor may not touch Python) so
// that its address cannot be reused by another tuple. Made on first use and never destroyed:
// at thread exit the runtime's own per-thread streams may be gone before it (thread_local
// destructors of other files run in no set order), and the guards' restoring would touch them;
// a thread's blocks are all exited by then anyway (`with` always exits).
struct AppliedBlocks {
  PyObject* tuple = nullptr;
  std::vector<std::unique_ptr<StreamGuard>> guards;
};
thread_local AppliedBlocks* tls_applied = nullptr;

}  // namespace

void sync_current_streams() {
  PyObject* value = nullptr;
  if (PyContextVar_Get(g_blocks_var, nullptr, &value) < 0) throw py::error_already_set();
  py::object blocks = py::reinterpret_steal<py::object>(value);
  if (!tls_applied) tls_applied = new AppliedBlocks;
  AppliedBlocks& applied = *tls_applied;
  if (blocks.ptr() == applied.tuple || (!blocks && !applied.tuple)) return;
  while (!applied.guards.empty()) applied.guards.pop_back();  // innermost first
  // If entering one fails (MemoryError), the tuple is not marked applied: the next call
  // starts over.
  if (blocks) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(blocks)) {
      applied.guards.push_back(std::make_unique<StreamGuard>(h.cast<const Stream&>()));
    }
  }
  Py_XINCREF(blocks.ptr());
  Py_XDECREF(applied.tuple);
  applied.tuple = blocks.ptr();
}

namespace {

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

// Stream.synchronize() and ev.synchronize(): the C++ SyncPoint, waited for in slices (its end
// is fixed when it is made: the slices never chase work enqueued meanwhile); then a device that
// has failed as a whole raises DeviceError.
void synchronize_interruptibly(const SyncPoint& end) {
  wait_interruptible([&] { return end.query() && end.wait_for(nanoseconds(0)); },
                     [&](nanoseconds slice) { return end.wait_for(slice); }, std::nullopt);
}

}  // namespace

void* native_from_number(std::intptr_t n) { return reinterpret_cast<void*>(n); }

std::optional<Stream> try_foreign_stream(const py::handle& obj) { return foreign_stream(obj); }

Event foreign_event(const py::handle& obj, const char* where) {
  py::object e = py::module_::import("eventide._interop").attr("as_event")(obj);
  if (e.is_none()) {
    throw py::type_error(std::string(where) + ": expected an event (eventide's, or torch's, CuPy's or "
                         "Numba's) or a stream, got " + py::repr(obj).cast<std::string>());
  }
  return e.cast<Event>();
}

Stream as_stream(const py::handle& obj, const char* where) {
  if (py::isinstance<Stream>(obj)) return obj.cast<Stream>();
  if (auto s = foreign_stream(obj)) return *s;
  throw py::type_error(std::string(where) + ": expected an eventide Stream or a CUDA stream of "
                       "another library (torch.cuda.Stream, cupy.cuda.Stream, an object with "
                       "__cuda_stream__), got " + py::repr(obj).cast<std::string>());
}


void bind_streams(py::module_& m) {
  g_blocks_var = PyContextVar_New("eventide_stream_blocks", nullptr);
  if (!g_blocks_var) throw py::error_already_set();
  m.add_object("_stream_blocks", py::handle(g_blocks_var));

  // --- Streams ---
  py::class_<Stream>(m, "Stream", "An in-order queue of device work.")
      .def(py::init([](const py::object& device, int priority) {
             std::optional<Stream> given;
             if (py::isinstance<Stream>(device)) {
               given = device.cast<Stream>();
             } else {
               given = foreign_stream(device);
             }
             if (given) {
               if (priority != 0 && priority != given->priority()) {
                 throw InvalidArgument("Stream(" + py::repr(device).cast<std::string>() + ", priority=" +
                                       std::to_string(priority) + "): a stream over an existing one keeps "
                                       "its own priority (" + std::to_string(given->priority()) +
                                       "); make that stream with the priority you want");
               }
               return *given;
             }
             return Stream(device_or_default(device), StreamOptions{.priority = priority});
           }),
           "device"_a = py::none(), "priority"_a = 0,
           "Stream(device=None, priority=0): a new stream (lower priority numbers are more "
           "urgent: stream_priority_range() gives the device's range, and a priority outside it "
           "is clamped to the nearer end, as PyTorch does); Stream(torch_stream) or Stream(obj "
           "with __cuda_stream__): one over that stream (not owned), with its own priority")
      .def_property_readonly("priority", &Stream::priority,
                             "The stream's priority: lower numbers are more urgent (a wrapped "
                             "stream's own).")
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
      }, "The native stream (a cudaStream_t as an int); 0 on the cpu.")
      .def_property_readonly("__cuda_stream__", [](const Stream& s) -> py::object {
        // The CUDA stream protocol, for the libraries that take streams through it. A cpu
        // stream has none: the attribute is missing (hasattr() is False).
        if (!s.native_handle()) {
          throw py::attribute_error(s.str() + " has no CUDA stream (__cuda_stream__)");
        }
        const auto handle = reinterpret_cast<std::uintptr_t>(s.native_handle());
        return py::cpp_function([handle] { return py::make_tuple(0, handle); });
      }, "The CUDA stream protocol: a function returning (0, handle). Missing on cpu streams.")
      .def_property_readonly("device", &Stream::device, "The stream's device.")
      .def_property_readonly("id", &Stream::id, "A number unique to the stream in this process.")
      .def("wait",
           [](Stream& s, const py::object& what) {
             if (py::isinstance<Event>(what)) {
               s.wait(what.cast<const Event&>());
             } else if (py::isinstance<Stream>(what)) {
               s.wait_stream(what.cast<const Stream&>());
             } else if (auto other = foreign_stream(what)) {
               s.wait_stream(*other);
             } else {
               s.wait(foreign_event(what, "Stream.wait"));
             }
           },
           "event_or_stream"_a,
           "Later work on this stream waits for an event (eventide's, or another library's: "
           "torch.cuda.Event, torch.Event, cupy.cuda.Event, a Numba event; on a GPU the GPU "
           "waits, the host does not), or for all work so far on a stream.")
      .def("wait_event",
           [](Stream& s, const py::object& event) {
             s.wait(py::isinstance<Event>(event) ? event.cast<Event>() : foreign_event(event, "Stream.wait_event"));
           },
           "event"_a, "Later work on this stream waits for the event (see wait).")
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
      .def("synchronize", [](const Stream& s) { synchronize_interruptibly(SyncPoint(s)); },
           "Block until all work enqueued so far on the stream has finished (on a GPU, other "
           "code's work on the native stream too). Raises DeviceError if the device has failed.")
      .def_property_readonly("error", [](const Stream& s) -> py::object {
        auto err = s.error();
        return err ? to_python_exception(err) : py::none();
      }, "The exception that broke the stream (its device failed), else None.")
      .def("__enter__", [](const py::object& s) { enter_stream(s); return s; })
      .def("__exit__", [](const Stream& s, const py::args&) { exit_stream(s); })
      .def("__repr__", [](const Stream& s) { return "<eventide.Stream " + s.str() + ">"; })
      .def("__eq__", [](const Stream& a, const py::object& b) {
        return py::isinstance<Stream>(b) && a == b.cast<const Stream&>();
      })
      .def("__hash__", [](const Stream& s) { return std::hash<std::uint64_t>{}(s.id()); });

  m.def("current_stream", [](const py::object& d) {
          sync_current_streams();
          return Stream::current(device_or_default(d));
        },
        "device"_a = py::none());
  m.def("stream_priority_range",
        [](const py::object& d) { return stream_priority_range(device_or_default(d)); },
        "device"_a = py::none(),
        "(least, greatest) stream priority of the device, as PyTorch's "
        "Stream.priority_range(): lower numbers are more urgent; (0, 0) where streams have one "
        "priority (the CPU).");
  m.def("default_stream", [](const py::object& d) { return Stream::default_stream(device_or_default(d)); },
        "device"_a = py::none());


  m.def("synchronize",
        [](const py::object& device) {
          auto d = to_device(device);
          synchronize_interruptibly(d ? SyncPoint(*d) : SyncPoint());
        },
        "device"_a = py::none(),
        "Wait for all work enqueued so far on the device (every device if None). Raises "
        "DeviceError if a device has failed.");
  m.def("empty_cache",
        [] {
          py::gil_scoped_release unlocked;
          return eventide::empty_cache();
        },
        "Give the memory eventide keeps for reuse (blocks of freed tensors, on every device) "
        "back to the system, as torch.cuda.empty_cache does; returns the bytes given back from "
        "eventide's own caches.");
}

}  // namespace eventide::python
