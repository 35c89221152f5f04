// ev.benchmark: the C++ benchmark() (eventide/benchmark.hpp) with a Python function. The loop
// runs with the GIL released; each call of the function, each progress line and each wait
// takes it back, so other Python threads run meanwhile, and Ctrl-C ends the benchmark between
// runs or during a wait (the waits are the interruptible ones of py_support.hpp). No runtime
// lock is held at those points (benchmark.cpp calls them from its plain loop).
#include "bindings.hpp"
#include "eventide/benchmark.hpp"

namespace eventide::python {

using namespace pybind11::literals;

namespace {

py::dict stats_dict(const BenchmarkStats& s) {
  return py::dict("mean"_a = s.mean.count(), "stdev"_a = s.stdev.count(), "min"_a = s.min.count(),
                  "p50"_a = s.p50.count(), "median"_a = s.p50.count(), "p99"_a = s.p99.count(),
                  "max"_a = s.max.count());
}

py::list micros_list(const std::vector<BenchmarkResult::Micros>& times) {
  py::list out;
  for (auto t : times) out.append(t.count());
  return out;
}

// A Python error raised in `fn` or the sink crosses the C++ loop as a PythonError (which
// takes the GIL to drop its reference) and is raised again as itself.
[[noreturn]] void rethrow_python(py::error_already_set& e) {
  py::object exc = py::reinterpret_borrow<py::object>(e.value());
  py::object tb = py::reinterpret_steal<py::object>(PyException_GetTraceback(exc.ptr()));
  if (!tb && e.trace()) PyException_SetTraceback(exc.ptr(), e.trace().ptr());
  throw PythonError(exc);
}

BenchmarkResult run_benchmark(const py::object& fn, int n_repeat, int n_warmup,
                              const py::object& max_duration, const py::object& name,
                              const py::object& device, const py::object& progress) {
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error("benchmark: fn must be callable, got " + py::repr(fn).cast<std::string>());
  }
  BenchmarkOptions options;
  options.n_repeat = n_repeat;
  options.n_warmup = n_warmup;
  if (!max_duration.is_none()) {
    std::optional<double> seconds = parse_timeout(max_duration, "max_duration");  // a non-negative number
    if (*seconds < kNoLimitSeconds) options.max_duration = std::chrono::duration<double>(*seconds);
  }
  options.name = name.is_none() ? std::string() : str_argument(py::str(name), "benchmark: name");
  sync_current_streams();
  options.device = device_or_default(device);
  if (progress.is_none()) {
    options.progress = BenchmarkProgress::automatic;
  } else {
    const int wanted = PyObject_IsTrue(progress.ptr());
    if (wanted < 0) throw py::error_already_set();
    options.progress = wanted ? BenchmarkProgress::always : BenchmarkProgress::never;
  }
  py::object stderr_file = py::module_::import("sys").attr("stderr");
  options.progress_sink = [&stderr_file](std::string_view line, bool last) {
    py::gil_scoped_acquire gil;
    try {
      stderr_file.attr("write")("\r" + std::string(line) + (last ? "\n" : ""));
      stderr_file.attr("flush")();
    } catch (py::error_already_set& e) {
      rethrow_python(e);
    }
  };
  options.wait = [](const Event& end) {
    py::gil_scoped_acquire gil;
    try {
      wait_event(end, py::none());
    } catch (py::error_already_set& e) {
      rethrow_python(e);  // KeyboardInterrupt
    }
  };
  auto call = [&fn] {
    py::gil_scoped_acquire gil;
    try {
      sync_current_streams();  // the `with stream:` blocks of the caller's context
      fn();
    } catch (py::error_already_set& e) {
      rethrow_python(e);
    }
  };
  py::gil_scoped_release unlocked;
  return benchmark(call, options);
}

}  // namespace

void bind_benchmark(py::module_& m) {
  py::class_<BenchmarkResult>(m, "BenchmarkResult",
                              "Times of ev.benchmark's runs, in microseconds: host (CPU) time of "
                              "each call and device time between the markers around it.")
      .def_readonly("name", &BenchmarkResult::name, "The benchmark's name (str).")
      .def_readonly("device", &BenchmarkResult::device,
                    "The device whose current stream got the markers.")
      .def_readonly("n_warmup", &BenchmarkResult::n_warmup, "Untimed runs made first (int).")
      .def_property_readonly("n_runs", [](const BenchmarkResult& r) { return r.host_times.size(); },
                             "Timed runs made (int): n_repeat, or fewer if max_duration ended them.")
      .def_property_readonly("host_times_us",
                             [](const BenchmarkResult& r) { return micros_list(r.host_times); },
                             "Host (CPU) time of each run's call, microseconds (list of float).")
      .def_property_readonly("device_times_us",
                             [](const BenchmarkResult& r) { return micros_list(r.device_times); },
                             "Device time of each run, microseconds (list of float): from the "
                             "marker before the call to the one after, on the current stream.")
      .def_property_readonly("host_stats",
                             [](const BenchmarkResult& r) { return stats_dict(r.host_stats()); },
                             "mean, stdev, min, p50 (= median), p99, max of host_times_us (dict).")
      .def_property_readonly("device_stats",
                             [](const BenchmarkResult& r) { return stats_dict(r.device_stats()); },
                             "mean, stdev, min, p50 (= median), p99, max of device_times_us (dict).")
      .def("__str__", &BenchmarkResult::str)
      .def("__repr__", &BenchmarkResult::str);

  m.def("_benchmark", &run_benchmark, "fn"_a, "n_repeat"_a, "n_warmup"_a, "max_duration"_a,
        "name"_a, "device"_a, "progress"_a,
        "benchmark() of a callable taking no arguments (ev.benchmark binds the arguments).");
}

}  // namespace eventide::python
