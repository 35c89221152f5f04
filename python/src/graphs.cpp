// Graphs: ev.capture() and Graph (eventide/graph.hpp).
//
//   with ev.capture() as g:      # a stream of its own, current in the block; nothing runs
//       ev.add(x, one, out=x)
//   done = g.replay()            # an Event
//
// The `with` block makes the capture's stream current the Python way (Stream.__enter__, which
// follows contexts and asyncio tasks), so the C++ Capture is made without its StreamGuard.
#include <memory>
#include <optional>
#include <utility>

#include "bindings.hpp"

using namespace pybind11::literals;

namespace eventide::python {

namespace {

// What `with ev.capture() as g` binds to g: the graph once the block has ended.
struct PyGraph {
  std::optional<Graph> graph;
  bool capturing = false;

  const Graph& get(const char* what) const {
    if (capturing) {
      throw StateError(std::string("Graph.") + what + ": the capture is still open: leave the "
                       "`with ev.capture()` block first");
    }
    if (!graph) {
      throw StateError(std::string("Graph.") + what + ": the capture did not end with a graph "
                       "(it was abandoned: see the error its `with` block raised)");
    }
    return *graph;
  }
};

// The context manager ev.capture(stream=None) returns.
struct PyCapture {
  py::object stream;  // the eventide Stream being captured
  std::shared_ptr<PyGraph> graph = std::make_shared<PyGraph>();
  std::unique_ptr<Capture> capture;
};

}  // namespace

void bind_graphs(py::module_& m) {
  py::class_<PyGraph, std::shared_ptr<PyGraph>>(
      m, "Graph",
      "Work captured once by `with ev.capture() as g:`, replayed by g.replay() for the cost of "
      "one op; each replay returns an Event.")
      .def("replay",
           [](const PyGraph& g, const py::object& stream) {
             const Graph& graph = g.get("replay");
             if (stream.is_none()) {
               sync_current_streams();
               return graph.replay();
             }
             return graph.replay(as_stream(stream, "Graph.replay"));
           },
           "stream"_a = py::none(),
           "Issue the whole graph on `stream` (the current stream of the graph's device if None) "
           "and return an Event that finishes when this replay is done: wait, poll, callbacks, "
           "await and time_elapsed() (the replay's device time, µs) work on it.")
      .def_property_readonly("device", [](const PyGraph& g) { return g.get("device").device(); },
                             "The device the graph was captured on (and replays on).")
      .def_property_readonly("ops", [](const PyGraph& g) { return g.get("ops").ops(); },
                             "How many ops the graph holds.")
      .def("__repr__", [](const PyGraph& g) {
        if (g.capturing) return std::string("<eventide.Graph (capturing)>");
        return "<eventide.Graph " + (g.graph ? g.graph->str() : std::string("abandoned")) + ">";
      });

  py::class_<PyCapture>(m, "_Capture")
      .def("__enter__",
           [](PyCapture& c) {
             const Stream s = c.stream.cast<Stream>();
             c.capture = std::make_unique<Capture>(s, CaptureOptions{.make_current = false});
             try {
               c.stream.attr("__enter__")();
             } catch (...) {
               c.capture.reset();  // abandoned: nothing was captured
               throw;
             }
             c.graph->capturing = true;
             return c.graph;
           })
      .def("__exit__",
           [](PyCapture& c, const py::object& type, const py::object&, const py::object&) {
             c.graph->capturing = false;
             c.stream.attr("__exit__")(py::none(), py::none(), py::none());
             std::unique_ptr<Capture> capture = std::move(c.capture);
             if (!capture) return false;
             if (!type.is_none()) return false;  // abandoned with the block's own exception
             c.graph->graph = capture->end();    // or the abandonment, raised
             return false;
           });

  m.def(
      "capture",
      [](const py::object& stream) {
        PyCapture c;
        if (stream.is_none()) {
          sync_current_streams();
          std::optional<Device> d = to_device(py::none());
          c.stream = py::cast(Stream(d ? *d : default_device()));
        } else {
          c.stream = py::cast(as_stream(stream, "capture"));
        }
        return c;
      },
      "stream"_a = py::none(),
      "`with ev.capture() as g:` records the work issued in the block on a new stream of the "
      "default device (or on `stream`), current in the block, into the Graph g instead of "
      "running it. What cannot be captured (a host wait or poll of captured work, synchronize, "
      "a wait for a UserEvent not yet set, random numbers, a copy between devices) raises "
      "EventStateError and abandons the capture.");
}

}  // namespace eventide::python
