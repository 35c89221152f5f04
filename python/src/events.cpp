// Event and UserEvent: callbacks, the cycle collection of a UserEvent held by its own
// callbacks, and the waits (each in slices that Ctrl-C can end: py_support.hpp).
#include <cstddef>
#include <vector>

#include "bindings.hpp"
#include "eventide/interop.hpp"

namespace eventide::python {

using namespace pybind11::literals;
using std::chrono::nanoseconds;

namespace {

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
  return u->visit_pending_callbacks([&](detail::Callback& callback) -> int {
    if (PyCallback* c = callback.target<PyCallback>()) Py_VISIT(c->fn.get().ptr());
    return 0;
  });
}

extern "C" void user_event_finalize(PyObject* self) {
  UserEvent* u = user_event_of(self);
  if (u == nullptr || u->handle_count() != 1) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // a finalizer leaves the error indicator alone
  u->abandon();  // what dropping the last handle does: fails it if unset
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

// wait_all and wait_any are the C++ ones, called in slices: their checks (an empty event, an
// empty list) and their errors are theirs.
bool wait_all_events(const py::sequence& seq, const py::object& timeout) {
  std::vector<Event> events = to_events(seq, "wait_all");
  return wait_interruptible([&] { return eventide::wait_all_for(events, nanoseconds(0)); },
                            [&](nanoseconds slice) { return eventide::wait_all_for(events, slice); },
                            parse_timeout(timeout));
}

py::object wait_any_events(const py::sequence& seq, const py::object& timeout) {
  std::vector<Event> events = to_events(seq, "wait_any");
  std::optional<std::size_t> index;
  auto wait_any_for = [&](nanoseconds slice) {
    index = eventide::wait_any(events, slice);
    return index.has_value();
  };
  bool done = wait_interruptible([&] { return wait_any_for(nanoseconds(0)); }, wait_any_for,
                                 parse_timeout(timeout));
  if (!done) return py::none();
  return py::int_(*index);
}

}  // namespace

detail::Callback to_callback(const py::object& fn, const char* where) {
  if (!PyCallable_Check(fn.ptr())) {
    throw InvalidArgument(std::string(where) + ": the callback is not callable: " +
                          py::repr(fn).cast<std::string>());
  }
  return detail::Callback(PyCallback{PyHandle(fn)});
}

bool wait_event(const Event& e, const py::object& timeout) {
  bool done = wait_interruptible([&] { return e.poll(); },
                                 [&](nanoseconds slice) { return e.wait_for(slice); },
                                 parse_timeout(timeout));
  if (done) {
    if (auto err = e.error()) std::rethrow_exception(err);
  }
  return done;
}

namespace {

// Event.wait(timeout): a stream given where PyTorch's Event.wait(stream) takes one is pointed
// to Stream.wait(event).
bool wait_event_checked(const Event& e, const py::object& timeout) {
  if (!timeout.is_none() && !PyFloat_Check(timeout.ptr()) && !PyLong_Check(timeout.ptr())) {
    const bool stream_like = py::isinstance<Stream>(timeout) || py::hasattr(timeout, "__cuda_stream__") ||
                             py::hasattr(timeout, "cuda_stream");
    if (stream_like) {
      throw InvalidArgument("Event.wait(" + py::repr(timeout).cast<std::string>() +
                            "): eventide's Event.wait blocks the host (its argument is a timeout "
                            "in seconds); to make a stream wait for the event, as PyTorch's "
                            "Event.wait(stream) does, call stream.wait(event)");
    }
  }
  return wait_event(e, timeout);
}

// The eventide Stream or Device a marker for another library's tensor goes to
// (eventide._interop.tensor_marker_target): a Stream, or a Device where nothing is pending.
py::object foreign_tensor_target(const py::handle& obj) {
  return py::module_::import("eventide._interop").attr("tensor_marker_target")(obj);
}

}  // namespace

void record_event(Event& e, const py::object& obj, const py::object& stream) {
  py::object what = obj;
  if (!stream.is_none()) {
    if (!obj.is_none()) {
      throw py::type_error("Event.record: give a tensor or stream, or stream=, not both");
    }
    what = stream;
  }
  if (what.is_none()) {
    sync_current_streams();
    e.record();
  } else if (py::isinstance<Tensor>(what)) {
    e.record(what.cast<const Tensor&>());
  } else if (py::isinstance<Stream>(what)) {
    e.record(what.cast<const Stream&>());
  } else if (auto s = try_foreign_stream(what)) {
    e.record(*s);
  } else if (py::hasattr(what, "__dlpack_device__") || py::hasattr(what, "__cuda_array_interface__") ||
             py::hasattr(what, "__array_interface__")) {
    py::object target = foreign_tensor_target(what);
    if (py::isinstance<Stream>(target)) {
      e.record(target.cast<const Stream&>());
    } else {
      // Host memory (NumPy, a torch cpu tensor): its producer ran when it returned.
      Device d = target.cast<Device>();
      interop::record_nothing(e, e.device().value_or(d));
    }
  } else {
    throw py::type_error("Event.record: expected a tensor (eventide's or another library's), a "
                         "stream (eventide's or another library's) or None, got " +
                         py::repr(what).cast<std::string>());
  }
}

Event event_from_native(const py::object& handle, const py::object& device, bool enable_timing) {
  if (py::isinstance<py::bool_>(handle) || !(PyLong_Check(handle.ptr()) || py::hasattr(handle, "__int__"))) {
    throw py::type_error("Event.from_native: the handle must be an int (a cudaEvent_t), got " +
                         py::repr(handle).cast<std::string>());
  }
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Long(handle.ptr()));
  if (!number) throw py::error_already_set();
  const auto value = number.cast<std::uintptr_t>();
  if (value == 0) {
    throw InvalidArgument("Event.from_native: the handle is 0 (null); a native event that was "
                          "never created has nothing to wait for");
  }
  Device d = device.is_none() ? default_native_device("Event.from_native") : device_or_default(device);
  return Event::from_native(reinterpret_cast<CUevent_st*>(value), d, EventOptions{.enable_timing = enable_timing});
}

Device default_native_device(const char* where) {
  Device d = default_device();
  if (d.kind() == DeviceKind::cuda) return d;
  if (is_available(Device::cuda(0))) return Device::cuda(0);
  throw InvalidArgument(std::string(where) + ": no CUDA device is available here (a native event "
                        "belongs to a CUDA device)");
}

py::int_ native_event_of(const Event& e) {
  CUevent_st* native = nullptr;
  {
    py::gil_scoped_release unlocked;  // a few CUDA calls
    native = e.native_handle();
  }
  return py::int_(reinterpret_cast<std::uintptr_t>(native));
}

std::string event_repr(const Event& e) {
  std::string s = e.str();  // "<Event pending on cpu, 2 ops>"
  return "<eventide." + s.substr(1);
}

void bind_events(py::module_& m) {
  // --- Events ---
  py::class_<Event> event_class(
      m, "Event",
      "A marker in device work that tells the host, other streams and callbacks when that work "
      "is done, and how long it took. It is empty (new, or after reset()), pending (record() "
      "tied it to work still outstanding) or finished (all of it done; failed if some of it "
      "raised). wait() blocks the host until it finishes (EventStateError if empty); poll() and "
      "query() ask without blocking; Stream.wait(event) makes a stream wait for it; "
      "add_callback(fn) and `await event` run code once it finishes. time_elapsed() is the tied "
      "work's device time in microseconds, elapsed_time(end) the milliseconds from it to `end`.");
  event_class
      .def(py::init([](const py::object& device, bool enable_timing, bool blocking, bool interprocess) {
             return Event(to_device(device), EventOptions{.enable_timing = enable_timing,
                                                          .blocking = blocking,
                                                          .interprocess = interprocess});
           }),
           "device"_a = py::none(), "enable_timing"_a = true, "blocking"_a = false,
           "interprocess"_a = false,
           "Event(device=None, enable_timing=True, blocking=False, interprocess=False): an "
           "empty event. enable_timing: keep device times (time_elapsed, elapsed_time); "
           "blocking: host waits sleep at once instead of spinning first; interprocess: meant "
           "for export_event (any event can be exported; the flag is PyTorch's).")
      .def("record", &record_event, "obj"_a = py::none(), py::kw_only(), "stream"_a = py::none(),
           "record(obj=None, *, stream=None): tie the event to the op that produced a tensor "
           "(eventide's, or another library's: a marker on that library's current stream for "
           "the tensor's device), or place a marker at the current end of a stream (an eventide "
           "Stream or another library's, e.g. torch.cuda.current_stream()); None: the current "
           "stream. stream= is PyTorch's, CuPy's and Numba's keyword.")
      .def_static("from_native",
                  [](const py::object& handle, const py::object& device, bool enable_timing) {
                    return event_from_native(handle, device, enable_timing);
                  },
                  "handle"_a, "device"_a = py::none(), "enable_timing"_a = true,
                  "Event.from_native(handle, device=None): an Event standing for a native CUDA "
                  "event (a cudaEvent_t as an int) as it is now: it finishes once the GPU has "
                  "passed that event's most recent record. device: the CUDA device whose internal "
                  "stream waits for it (default: the default device if it is a GPU, else cuda:0).")
      .def_static("_of_nothing",
                  [](const py::object& device) {
                    Event e(to_device(device));
                    interop::record_nothing(e, to_device(device).value_or(Device::cpu()));
                    return e;
                  },
                  "device"_a = py::none(),
                  "A finished event tied to nothing (another library's event never recorded).")
      .def_property_readonly("cuda_event", &native_event_of,
                             "A native CUDA event (cudaEvent_t, as an int) that the GPU passes once "
                             "the work tied so far has finished, for other libraries and CUDA code "
                             "to wait on (recorded again at each read). It belongs to this event and "
                             "lives as long as it does. EventStateError for an empty event or work "
                             "held on the host; on the CPU there is none.")
      .def("native_handle", &native_event_of, "The same as the cuda_event property.")
      .def_property_readonly("blocking", [](const Event& e) { return e.options().blocking; },
                             "Whether host waits sleep at once instead of spinning first.")
      .def_property_readonly("interprocess", [](const Event& e) { return e.options().interprocess; },
                             "Whether the event was made with interprocess=True.")
      .def("wait", &wait_event_checked, "timeout"_a = py::none(),
           "Block until finished (True) or `timeout` seconds pass (False). Raises the error of "
           "failed work, EventStateError if the event is empty. (PyTorch's Event.wait(stream) "
           "makes a stream wait: that is Stream.wait(event) here.)")
      .def_property_readonly("device", &Event::device,
                             "The device of the tied work; None until the first record unless given.")
      .def_property_readonly("status", [](const Event& e) { return std::string(name(e.status())); },
                             "'empty', 'pending', 'finished' or 'failed' (never blocks).")
      .def_property_readonly("enable_timing", &Event::timing_enabled,
                             "Whether the event keeps device times (time_elapsed, elapsed_time).")
      .def_property_readonly("error", [](const Event& e) -> py::object {
        auto err = e.error();
        return err ? to_python_exception(err) : py::none();
      }, "The exception of the failed tied work, else None (never blocks).")
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
             return e.add_callback(to_callback(fn, "add_callback"));
           },
           "fn"_a, "add_callback(fn), returning an id for _remove_callback().")
      .def("_remove_callback",
           [](Event& e, Event::CallbackId id) { return e.remove_callback(id); }, "id"_a,
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
      .def(py::init([](const py::object& device, bool enable_timing, bool blocking) {
             return UserEvent(to_device(device),
                              EventOptions{.enable_timing = enable_timing, .blocking = blocking});
           }),
           "device"_a = py::none(), "enable_timing"_a = true, "blocking"_a = false)
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


  m.def("_wait_all_events", &wait_all_events, "events"_a, "timeout"_a = py::none());
  m.def("_wait_any_events", &wait_any_events, "events"_a, "timeout"_a = py::none(),
        "Index of a finished event (the lowest), or None on timeout.");
}

}  // namespace eventide::python
