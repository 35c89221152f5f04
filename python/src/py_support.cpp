#include "py_support.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>
#include <thread>

#include "eventide/errors.hpp"
#include "eventide/interop.hpp"
#include "eventide/profiler.hpp"

namespace eventide::python {

namespace {
std::atomic<bool> g_exiting{false};

PyObject* g_eventide_error = nullptr;
PyObject* g_state_error = nullptr;
PyObject* g_device_error = nullptr;
PyObject* g_op_error = nullptr;
PyObject* g_invalid_argument = nullptr;

PyObject* new_exception(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("eventide.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // takes its own reference; ours stays in the global
  return type;
}
}  // namespace

bool python_alive() noexcept { return !g_exiting.load(std::memory_order_acquire) && Py_IsInitialized(); }
void mark_python_exiting() noexcept { g_exiting.store(true, std::memory_order_release); }

namespace {
void release_now(void* p) {
  if (!python_alive()) return;  // the interpreter went away meanwhile: leaked
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(p));
  PyGILState_Release(state);
}
}  // namespace

void PyHandle::reset() noexcept {
  PyObject* obj = std::exchange(obj_, nullptr);
  if (!obj || !python_alive()) return;
  // Taking the GIL under a runtime lock could freeze the process (runtime_lock.hpp): then the
  // release waits until this thread holds none.
  interop::run_when_unlocked(&release_now, obj);
}

PythonError::PythonError(py::object exc) {
  what_ = py::str(exc).cast<std::string>();
  std::string type = py::str(py::type::handle_of(exc).attr("__name__")).cast<std::string>();
  what_ = what_.empty() ? type : type + ": " + what_;
  exc_ = std::make_shared<PyHandle>(std::move(exc));
}

std::string python_message(std::string_view text) {
  // The C++ spellings in eventide's messages, and what Python calls the same things.
  static constexpr std::pair<std::string_view, std::string_view> kWords[] = {
      {"f32", "float32"}, {"f64", "float64"}, {"f16", "float16"},
      {"bf16", "bfloat16"}, {"i32", "int32"}, {"i64", "int64"},
  };
  static constexpr std::pair<std::string_view, std::string_view> kPrefixes[] = {
      {"Tensor::", "Tensor."}, {"<Event ", "<eventide.Event "}, {"<UserEvent ", "<eventide.UserEvent "},
  };
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  out.reserve(text.size() + 16);
  std::size_t i = 0;
  while (i < text.size()) {
    // A quoted value ('f32', "bf16") is the user's own text: kept as written.
    const char c = text[i];
    if ((c == '\'' || c == '"') && (i == 0 || !word_char(text[i - 1]))) {
      std::size_t close = text.find(c, i + 1);
      while (close != std::string_view::npos && close + 1 < text.size() && word_char(text[close + 1])) {
        close = text.find(c, close + 1);  // an apostrophe inside ("it's"), not the end
      }
      if (close != std::string_view::npos) {
        out.append(text.substr(i, close + 1 - i));
        i = close + 1;
        continue;
      }
    }
    bool replaced = false;
    for (const auto& [from, to] : kPrefixes) {
      if (text.substr(i, from.size()) == from) {
        out += to;
        i += from.size();
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    // A word inside a path or a file name (/data/f32/x.bin, f32.npy) is the user's text too.
    auto in_path = [&](std::size_t end) {
      const bool slash_before = i > 0 && (text[i - 1] == '/' || text[i - 1] == '\\' || text[i - 1] == '.');
      const bool slash_after = end < text.size() && (text[end] == '/' || text[end] == '\\');
      const bool dot_name = end + 1 < text.size() && text[end] == '.' && word_char(text[end + 1]);
      return slash_before || slash_after || dot_name;
    };
    if (i == 0 || !word_char(text[i - 1])) {
      for (const auto& [from, to] : kWords) {
        const std::size_t end = i + from.size();
        if (text.substr(i, from.size()) == from && (end == text.size() || !word_char(text[end])) && !in_path(end)) {
          out += to;
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

py::object to_python_exception(const std::exception_ptr& error) {
  auto make = [](PyObject* type, const char* what) {
    const std::string text = python_message(what);
    return py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", text.c_str()));
  };
  try {
    std::rethrow_exception(error);
  } catch (const PythonError& e) {
    return py::reinterpret_borrow<py::object>(e.exception());
  } catch (const OpError& e) {
    py::object exc = make(g_op_error, e.what());
    if (e.cause()) {
      py::object cause = to_python_exception(e.cause());
      PyException_SetCause(exc.ptr(), cause.release().ptr());
    }
    return exc;
  } catch (const InvalidArgument& e) {
    return make(g_invalid_argument, e.what());
  } catch (const StateError& e) {
    return make(g_state_error, e.what());
  } catch (const DeviceError& e) {
    return make(g_device_error, e.what());
  } catch (const Error& e) {
    return make(g_eventide_error, e.what());
  } catch (const py::error_already_set& e) {
    return py::reinterpret_borrow<py::object>(e.value());
  } catch (const std::exception& e) {
    return make(PyExc_RuntimeError, e.what());
  } catch (...) {
    return make(PyExc_RuntimeError, "unknown C++ exception");
  }
}

void register_exceptions(py::module_& m) {
  g_eventide_error = new_exception(m, "EventideError", PyExc_RuntimeError,
                                   "Base of every eventide error (a RuntimeError).");
  g_state_error = new_exception(m, "EventStateError", g_eventide_error,
                                "The call does not fit the object's state (waiting on an empty "
                                "event, resetting a pending one, ...).");
  g_device_error = new_exception(m, "DeviceError", g_eventide_error,
                                 "The device or its driver failed.");
  g_op_error = new_exception(m, "OpError", g_eventide_error,
                             "Device work failed or was skipped; __cause__ is the original error.");
  py::tuple bases = py::make_tuple(py::handle(g_eventide_error), py::handle(PyExc_ValueError));
  g_invalid_argument = new_exception(m, "InvalidArgumentError", bases.ptr(),
                                     "A bad argument: shape, dtype, device, ... (also a "
                                     "ValueError).");
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const Error&) {
      py::object exc = to_python_exception(p);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } catch (const PythonError&) {
      py::object exc = to_python_exception(p);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

std::optional<double> parse_timeout(const py::object& timeout, const char* argument) {
  if (timeout.is_none()) return std::nullopt;
  if (!PyFloat_Check(timeout.ptr()) && !PyIndex_Check(timeout.ptr())) {
    throw py::type_error(std::string(argument) + " must be None or a number of seconds, got " +
                         py::repr(timeout).cast<std::string>());
  }
  double t;
  if (PyFloat_Check(timeout.ptr())) {
    t = PyFloat_AS_DOUBLE(timeout.ptr());
  } else {
    // An integer (or an index) past a double's range, 10**400: a limit no clock reaches.
    py::object as_int = py::reinterpret_steal<py::object>(PyNumber_Index(timeout.ptr()));
    if (!as_int) throw py::error_already_set();
    t = PyLong_AsDouble(as_int.ptr());
    if (t == -1.0 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
      PyErr_Clear();
      const int negative = PyObject_RichCompareBool(as_int.ptr(), py::int_(0).ptr(), Py_LT);
      if (negative < 0) throw py::error_already_set();
      t = negative ? -1.0 : std::numeric_limits<double>::infinity();
    }
  }
  if (std::isnan(t) || t < 0) {
    throw InvalidArgument(std::string(argument) + " must be None or a non-negative number of seconds, got " +
                          py::repr(timeout).cast<std::string>());
  }
  return t;
}

long long int_argument(const py::object& value, const char* argument, long long least, long long most) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    throw py::type_error(std::string(argument) + " must be an integer, got " + py::repr(value).cast<std::string>());
  }
  py::object as_int = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!as_int) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(as_int.ptr(), &overflow);
  if (v == -1 && !overflow && PyErr_Occurred()) throw py::error_already_set();
  if (overflow || v < least || v > most) {
    throw InvalidArgument(std::string(argument) + " must be from " + std::to_string(least) + " to " +
                          std::to_string(most) + ", got " + py::repr(value).cast<std::string>());
  }
  return v;
}

std::string str_argument(const py::object& value, const char* argument) {
  if (!PyUnicode_Check(value.ptr())) {
    throw py::type_error(std::string(argument) + " must be a str, got " + py::repr(value).cast<std::string>());
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (!utf8) {
    PyErr_Clear();
    throw InvalidArgument(std::string(argument) + " must be text that UTF-8 can hold (no lone surrogates), got " +
                          py::repr(value).cast<std::string>());
  }
  return std::string(utf8, static_cast<std::size_t>(size));
}

bool wait_interruptible(const std::function<bool()>& ready,
                        const std::function<bool(std::chrono::nanoseconds)>& try_wait,
                        std::optional<double> timeout_s) {
  if (ready()) return true;
  // For a profiler: the slices are one wait.
  HostWaitScope wait_group;
  using namespace std::chrono;
  constexpr nanoseconds kSlice = milliseconds(20);
  std::optional<steady_clock::time_point> deadline;
  if (timeout_s && *timeout_s < kNoLimitSeconds) {
    deadline = steady_clock::now() + duration_cast<nanoseconds>(duration<double>(*timeout_s));
  }
  for (;;) {
    nanoseconds slice = kSlice;
    if (deadline) slice = std::clamp(duration_cast<nanoseconds>(*deadline - steady_clock::now()),
                                     nanoseconds(0), kSlice);
    // Not gil_scoped_release: during interpreter exit, taking the GIL back ends a daemon
    // thread by unwinding its stack (pthread_exit), which a noexcept destructor turns into
    // std::terminate. Here it unwinds through ordinary code.
    bool done;
    PyThreadState* thread = PyEval_SaveThread();
    try {
      done = try_wait(slice);
    } catch (...) {
      PyEval_RestoreThread(thread);
      throw;
    }
    if (!python_alive()) {
      // The interpreter is going away: this thread (a daemon) must not touch it again. It
      // sleeps until the process ends.
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    PyEval_RestoreThread(thread);
    if (done) {
      wait_group.finish(true);
      return true;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (deadline && steady_clock::now() >= *deadline) return false;
  }
}

}  // namespace eventide::python
