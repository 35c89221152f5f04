// Event and UserEvent: callbacks, the cycle collection of a UserEvent held by its own
// callbacks, and the waits (each in slices that Ctrl-C can end: py_support.hpp).
#include <cstddef>
#include <vector>

#include "bindings.hpp"

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

std::string event_repr(const Event& e) {
  std::string s = e.str();  // "<Event pending on cpu, 2 ops>"
  return "<eventide." + s.substr(1);
}

void bind_events(py::module_& m) {
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


  m.def("_wait_all_events", &wait_all_events, "events"_a, "timeout"_a = py::none());
  m.def("wait_any", &wait_any_events, "events"_a, "timeout"_a = py::none(),
        "Index of a finished event (the lowest), or None on timeout.");
}

}  // namespace eventide::python
