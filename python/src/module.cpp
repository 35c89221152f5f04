// The `eventide._eventide` extension: the C++ API for Python (bindings.hpp: which file binds
// what).
//
// Threads: every blocking call releases the GIL and waits in slices so that Ctrl-C
// (KeyboardInterrupt) ends it; Python callbacks run on the runtime's callback thread holding
// the GIL only while they run, and an exception in one goes to sys.unraisablehook.
#include "bindings.hpp"
#include "eventide/distributed.hpp"
#include "eventide/interop.hpp"

namespace eventide::python {

using namespace pybind11::literals;

PYBIND11_MODULE(_eventide, m) {
  m.doc() = "eventide: asynchronous device work and events (C++ core)";
  // The classes and functions are the public module's (the package re-exports them all): while
  // they are made, this module is called `eventide`, so that their __module__, the type names
  // in pybind11's signatures and TypeErrors, and tracebacks read `eventide.Tensor`, not
  // `eventide._eventide.Tensor`. The import system keeps the real name.
  const py::object real_name = m.attr("__name__");
  m.attr("__name__") = "eventide";
  register_exceptions(m);
  bind_types(m);
  bind_events(m);
  bind_streams(m);
  bind_tensors(m);
  bind_profiler(m);
  bind_benchmark(m);
  bind_graphs(m);
  bind_distributed(m);
  bind_ipc(m);
  bind_cli(m);

  m.def("_deferred_releases", &interop::deferred_releases,
        "How many releases of Python objects waited for their thread to let go of the "
        "runtime's locks (tests of the rule in eventide/interop.hpp).");
  // os.fork(): waits (GIL released: a running op's body may need it) for running CPU ops
  // before the interpreter forks (the runtime's pthread_atfork handlers do the rest).
  // Registered with os.register_at_fork by the package.
  m.def("_pause_for_fork", [] {
    py::gil_scoped_release unlocked;
    interop::pause_for_fork();
  });
  m.def("_resume_after_fork", [] { interop::resume_after_fork(); });
  m.def("default_device", &default_device,
        "The device ops use when none is given: $EVENTIDE_DEVICE if set, else cuda:0 if "
        "available, else cpu.");
  m.def("devices", &devices, "The available devices (cpu first).");
  m.def("is_available", [](const py::object& d) {
    try {
      auto dev = to_device(d);
      return dev && is_available(*dev);
    } catch (const Error&) {
      return false;
    }
  }, "device"_a, "Whether `device` (a Device, 'cpu', 'cuda:1', a torch.device) can be used; False "
     "for a spelling that names no device.");
  m.def("device_info", [](const py::object& d) {
    DeviceInfo info = device_info(device_or_default(d));
    return py::dict("device"_a = info.device, "name"_a = info.name, "description"_a = info.description);
  }, "device"_a = py::none());
  m.def("set_allow_tf32", &set_allow_tf32, "allow"_a,
        "Let f32 matmul on GPUs use TF32 tensor cores (off by default, as in PyTorch).");
  m.def("allow_tf32", &allow_tf32, "Whether f32 matmul on GPUs may use TF32 (set_allow_tf32).");
  m.attr("__version__") = std::string(version());
  m.attr("__name__") = real_name;


  // At interpreter exit (after non-daemon threads have finished): no runtime thread may touch
  // Python any more; then the runtime stops, with the GIL released so that a callback that is
  // running can finish.
  // First the communicators end (eventide/distributed.hpp), while the runtime still runs the
  // collectives already issued, so that every rank issues them: once it stops, queued work
  // fails without running. MPI ends later, in the exit hook, which knows the exit status: a
  // failure status ends the job instead. (mpi4py's own exit step, should MPI be its, comes
  // later.)
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    {
      py::gil_scoped_release release;
      distributed::finalize_at_exit(distributed::ExitStep::communicators);
    }
    mark_python_exiting();
    py::gil_scoped_release release;
    interop::shutdown();
  }));
}

}  // namespace eventide::python
