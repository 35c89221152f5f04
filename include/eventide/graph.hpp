// eventide/graph.hpp: graphs: capture a stream's work once, replay it for the cost of one op,
// each replay an event like any op's.
//
//   ev::Tensor x = ev::ones({1024}), one = ev::ones({1024});
//   ev::Graph g;
//   {
//     ev::Capture capture;                 // a stream of its own, current in this scope
//     for (int i = 0; i < 100; ++i) ev::add_out(x, one, x);  // recorded, not run
//     g = capture.end();
//   }
//   ev::Event done = g.replay();           // runs the 100 adds; returns at once
//   done.wait();                           // done.time_elapsed(): the replay's device time
//
// Capture. While a Capture lives, what is issued on its stream is recorded into the graph
// instead of run: ops (their `_out` and `copy_` forms update tensors in place), events
// recorded there (each recorded again at its point of every replay: elapsed_time between
// two of them reads the latest replay's time), and the work of other streams of the device
// that joined the capture by waiting on an event recorded in it (they must be joined back:
// the capture's stream waits on an event recorded on them after their last op). Nothing runs
// during the capture.
// * Tensors made in the capture are the graph's: their memory is fixed, each replay rewrites
//   it, and they have no value until the first replay (reading one fails, saying so).
//   Tensors from outside are read, and written in place, at replay time.
// * What cannot be captured abandons the capture and throws a StateError naming the capture
//   and the call: a host wait or a poll of captured work, synchronize or query of a capturing
//   stream, a wait for a UserEvent not yet set (a gate), a copy between devices, a
//   collective. (A wait for device work from outside, still running, orders every replay
//   after it.) Later calls on the capture's streams throw the same error; end() throws it;
//   nothing hangs.
// * Random numbers (rand, randn) are drawn afresh at each replay: the numbers the same ops
//   would draw if they were issued eagerly at the replay's call (manual_seed before a replay
//   makes it repeat).
//
// Replay. `replay(stream)` issues the whole graph on `stream` (of the graph's device) and
// returns an Event that finishes when that replay is done: waited for, polled, called back,
// timed (time_elapsed: the replay's device time) and failed like any op's. Replays are
// ordered like ops by the tensors they use: after the writers of what the graph reads, after
// the readers of what it writes (so no replay overwrites what an earlier one's readers still
// read, on any stream), and reading the graph's outputs waits for the replay that wrote them.
// A node that throws fails the replay, naming the op, and what depends on it. Under a Profiler
// a replay's op lists its parts (ProfiledOp::parts: its nodes on the CPU, the kernels CUPTI
// reports on a GPU), drawn in a "graph nodes" lane under its bar.
//
// Devices: the CPU (ops' bodies kept and run again) and CUDA GPUs (recorded into CUDA graphs,
// one cudaGraphLaunch per stretch between the capture's events; inside the capture, a stream's
// native_handle() is the capture's own CUDA stream, so other code's kernels launched there are
// captured in order with eventide's ops). Another device refuses the capture with
// InvalidArgument, saying why.
//
// Thread-safety: a Capture belongs to the thread that made it (its stream is that thread's
// current one in its scope). Graph is a cheap handle; replay() from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "eventide/device.hpp"
#include "eventide/event.hpp"
#include "eventide/stream.hpp"

namespace eventide {

namespace detail {
class CaptureState;
class GraphState;
}  // namespace detail

class Graph {
 public:
  // No graph: replay() is a StateError.
  Graph() = default;

  // Issues a replay on `stream`; returns its event. InvalidArgument for a stream of another
  // device; StateError for an empty Graph or on a stream that is capturing.
  Event replay(const Stream& stream) const;
  // replay(Stream::current(device())).
  Event replay() const;

  [[nodiscard]] bool defined() const noexcept { return state_ != nullptr; }
  Device device() const;
  // How many ops it holds.
  std::size_t ops() const;
  // "graph 3 (100 ops, captured on cpu stream 4)".
  std::string str() const;

 private:
  friend class Capture;
  explicit Graph(std::shared_ptr<detail::GraphState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::GraphState> state_;
};

// How a Capture treats its stream.
struct CaptureOptions {
  // The stream is the calling thread's current one in the Capture's scope (a StreamGuard), so
  // that ops go to it; false leaves the current streams alone (the Python binding, whose
  // `with` block makes it current its own way).
  bool make_current = true;
};

class Capture {
 public:
  // Captures on a new stream of the default device (of the innermost StreamGuard's device, if
  // any), made current for this scope.
  Capture();
  // The same on `device`.
  explicit Capture(Device device);
  // Captures on `stream`, made current for this scope (unless options say otherwise).
  // InvalidArgument where the device cannot capture; StateError if the stream captures
  // already.
  explicit Capture(const Stream& stream, CaptureOptions options = {});
  // Abandons the capture if end() was not called: nothing of it runs.
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // The stream being captured.
  // (A handle: a copy.)
  Stream stream() const noexcept { return stream_; }
  // Ends the capture: the graph, or the StateError that abandoned it. Once.
  Graph end();

 private:
  Stream stream_;
  std::shared_ptr<detail::CaptureState> state_;
  std::optional<StreamGuard> guard_;
};

}  // namespace eventide
