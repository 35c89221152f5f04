// What every binding file needs: GIL-aware ownership of Python objects, waits that release
// the GIL and stay interruptible, and the mapping of eventide's errors to Python exceptions.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace eventide::python {

namespace py = pybind11;

// False once the interpreter has begun to shut down (our atexit hook ran): from then on no
// runtime thread touches Python; references still held are leaked rather than released
// against a dying interpreter.
bool python_alive() noexcept;
void mark_python_exiting() noexcept;

// Owns one reference to a Python object, and may be destroyed on any thread: it takes the
// GIL to release the reference (a runtime thread drops callbacks and imported arrays).
class PyHandle {
 public:
  PyHandle() = default;
  explicit PyHandle(py::object obj) : obj_(obj.release().ptr()) {}
  PyHandle(PyHandle&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  PyHandle& operator=(PyHandle&& other) noexcept {
    if (this != &other) {
      reset();
      obj_ = std::exchange(other.obj_, nullptr);
    }
    return *this;
  }
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;
  ~PyHandle() { reset(); }

  py::handle get() const noexcept { return obj_; }
  void reset() noexcept;

 private:
  PyObject* obj_ = nullptr;
};

// A Python exception carried through the C++ runtime (UserEvent.fail, a callback's error),
// raised again as itself when it comes back to Python.
class PythonError : public std::exception {
 public:
  explicit PythonError(py::object exc);  // call with the GIL held
  const char* what() const noexcept override { return what_.c_str(); }
  py::handle exception() const noexcept { return exc_->get(); }

 private:
  std::shared_ptr<PyHandle> exc_;  // shared: exception_ptr copies the exception object
  std::string what_;
};

// An eventide error message as Python users read it: the C++ dtype spellings (f32, bf16, ...)
// become Python's (float32, bfloat16, ...), "Tensor::fn" becomes "Tensor.fn" and an event's
// "<Event ...>" its repr "<eventide.Event ...>". Quoted text (a user's value) is left alone.
std::string python_message(std::string_view text);

// Registers the exception classes on `m` and the translator from C++ errors.
void register_exceptions(py::module_& m);
// The Python exception object for a C++ exception_ptr (with __cause__ for an OpError).
py::object to_python_exception(const std::exception_ptr& error);

// Blocks in slices of at most 20 ms with the GIL released, calling `try_wait(slice)` until it
// returns true (done), the timeout passes (false), or a signal handler raises
// (KeyboardInterrupt propagates; the wait is simply abandoned). Returns at once, without
// releasing the GIL, if `ready()` is already true.
bool wait_interruptible(const std::function<bool()>& ready,
                        const std::function<bool(std::chrono::nanoseconds)>& try_wait,
                        std::optional<double> timeout_s);

// A timeout this long (about 31 years) means no limit: the deadline it gives would be beyond
// what a time point in nanoseconds holds (about 292 years) for much longer ones.
inline constexpr double kNoLimitSeconds = 1e9;

// A timeout in seconds from Python: None, or a non-negative number.
std::optional<double> parse_timeout(const py::object& timeout, const char* argument = "timeout");
// An integer argument in [least, most] (TypeError for a non-integer, InvalidArgument outside
// the range: never pybind11's bare "Unable to cast"), `argument` naming it.
long long int_argument(const py::object& value, const char* argument, long long least, long long most);
// A str argument (TypeError otherwise; InvalidArgument for one that is not valid UTF-8, a lone
// surrogate), as UTF-8.
std::string str_argument(const py::object& value, const char* argument);

}  // namespace eventide::python
