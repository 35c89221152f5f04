// What a device does with the ops of a graph capture (core/capture.hpp): the one seam between
// the capture, which the core owns on every device, and how a backend replays what it holds.
//
// A capture hands each op's body to its device's GraphRecorder as the op is issued, in issue
// order, and cuts the recording where an event is recorded (and where it ends): each cut is a
// stretch, which a replay runs as one op between those events' markers.
// - The host's way (HostGraphRecorder, the CPU's): the bodies are kept and run again, in order,
//   at each replay. Right for bodies that use their memory by address and nothing of the
//   stream they were issued on.
// - A GPU's way (CUDA: backends/cuda/cuda_graph.cpp): the recorder owns a native stream in
//   the device's own stream capture; the capture's streams hand that stream to the bodies
//   (and to other code, through Stream::native_handle) in place of theirs, so that a body
//   records its kernels into the native graph as it runs; a cut instantiates what was
//   recorded, and a replay's op launches it.
//
// - Following other code's capture (CUDA: a stream that torch.cuda.graph, CuPy or
//   cudaStreamBeginCapture captures): the bodies run on that native stream, into that code's
//   graph, which that code ends and replays; the recorder hands what the ops use to that
//   graph to keep (keep_with_graph), cuts nothing, and says when that capture is over.
//
// Threads: add() and cut() may come from several threads of the capture; a recorder orders
// them itself. Both are called under no runtime lock, and a body may issue eventide work.
#pragma once

#include <memory>
#include <string>

#include "eventide/detail/callback.hpp"

namespace eventide::detail {

class StreamState;

// A stretch of a graph: what a replay runs as one op.
class GraphStretch {
 public:
  virtual ~GraphStretch() = default;
  // The body of the op that replays the stretch on `stream`, a stream of the stretch's device.
  // The body uses the stretch by reference: the graph keeps both alive while a replay may run.
  virtual Callback replay_on(StreamState& stream) const = 0;
};

class GraphRecorder {
 public:
  virtual ~GraphRecorder() = default;
  // The native stream that the capture's ops and other code launch on to be captured (the
  // capture's streams answer it for theirs); null where the device has none.
  virtual void* native_stream() const noexcept { return nullptr; }
  // An op's body, issued in the capture: kept, or run now into the native graph. `name` names
  // the op in errors. Throws what recording it throws (the capture is then abandoned).
  virtual void add(const std::string& name, Callback body) = 0;
  // Ends the stretch recorded since the last cut (`last`: the capture ends); null if it holds
  // nothing. Throws (a DeviceError) if the device cannot make it.
  virtual std::unique_ptr<GraphStretch> cut(bool last) = 0;

  // --- A recorder that follows other code's capture (see the header comment). ---
  // "CUDA graph capture 7 of cuda:0 stream 3 (wrapped), begun by other code"; empty for a
  // recorder of eventide's own capture.
  virtual std::string follows() const { return {}; }
  // Whether that capture is still the one open on the native stream. From any thread, under
  // any lock: it asks the device only.
  virtual bool still_open() const noexcept { return true; }
  // Hands `release` to that code's graph: called once, when the graph and every instance
  // made of it are gone, on a thread of the device's own where nothing may call the device
  // or block (it should only post what it owns elsewhere). Throws if the graph cannot take it.
  virtual void keep_with_graph(Callback release) { (void)release; }
};

// The host's way: bodies kept and run again at each replay. `graph` ("graph 3, captured on cpu
// stream 1") names the graph when a body fails in a replay.
std::unique_ptr<GraphRecorder> make_host_graph_recorder(std::string graph);

}  // namespace eventide::detail
