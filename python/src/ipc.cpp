// Events across processes (eventide/ipc.hpp): export_event, import_event, ExportedEvent.
#include "bindings.hpp"
#include "eventide/ipc.hpp"

namespace eventide::python {

using namespace pybind11::literals;

void bind_ipc(py::module_& m) {
  py::class_<ipc::ExportedEvent>(
      m, "ExportedEvent",
      "An event exported to other processes of this machine (export_event). Pass `handle` to "
      "them (a pipe, a file, an environment variable); they call import_event(handle). Keep this "
      "object alive while they may import: close() (or leaving a `with` block, or dropping it) "
      "removes the handle's shared memory name; events imported before still finish.")
      .def_property_readonly("handle", &ipc::ExportedEvent::handle,
                             "The printable string another process passes to import_event.")
      .def_property_readonly("event", &ipc::ExportedEvent::event, "The event that was exported.")
      .def_property_readonly("native", &ipc::ExportedEvent::native,
                             "Whether importers on a GPU of the exporter's kind wait on the GPU "
                             "(a CUDA event's export), with no host round trip.")
      .def("close", &ipc::ExportedEvent::close,
           "Remove the handle's name now (later imports fail); idempotent.")
      .def("__enter__", [](ipc::ExportedEvent& x) -> ipc::ExportedEvent& { return x; },
           py::return_value_policy::reference_internal)
      .def("__exit__", [](ipc::ExportedEvent& x, const py::args&) { x.close(); })
      .def("__repr__", [](const ipc::ExportedEvent& x) {
        if (!x) return std::string("<eventide.ExportedEvent (empty)>");
        return "<eventide.ExportedEvent " + x.handle() + (x.native() ? " (GPU path)" : "") + ">";
      });
  m.def("export_event", &ipc::export_event, "event"_a,
        "Export `event` (the work tied to it now) to other processes of this machine: returns an "
        "ExportedEvent whose `handle` they pass to import_event. Never blocks. EventStateError for "
        "an empty event.");
  m.def("import_event",
        [](const std::string& handle, const py::object& device) {
          return ipc::import_event(handle, to_device(device));
        },
        "handle"_a, "device"_a = py::none(),
        "An Event that finishes when the event another process exported does (or fails with its "
        "error's text, or when that process dies first). `device`: where streams will wait on it "
        "(a CUDA device waits on the GPU for a CUDA export); None: the exporter's device if this "
        "process has it, else cpu. Timing does not cross processes: the event has timing "
        "disabled. InvalidArgumentError for a malformed handle or one whose exporter is gone.");
}

}  // namespace eventide::python
