// Graph capture on a GPU (core/graph_recorder.hpp, CUDA's way): a capture records into CUDA
// graphs through a stream of its own, and a replay's op launches them.
//
// The recorder makes a non-blocking native stream and begins a CUDA stream capture on it
// (cudaStreamCaptureModeRelaxed: eventide's threads and other code outside the capture go on
// calling CUDA as usual). While the capture is open, the capture's eventide streams hand this
// stream to their ops' bodies (CudaStream::launch_handle) and to other code
// (Stream::native_handle), so that a body run now, by add(), records its kernels, copies and
// cuBLASLt calls into the CUDA graph instead of running them, and so does other code's work
// launched there. Every stream of the capture records into the one native stream, in issue
// order: a CUDA graph of a chain, which its issue order makes correct (streams joined to the
// capture run in order with its own work, not beside it).
//
// A cut ends the CUDA capture, instantiates the graph (uploaded to the device at once, so the
// first replay pays no upload) and begins the next capture; a replay's op for the stretch is
// one cudaGraphLaunch on the replay's stream, timed and watched like any op. The executable
// graph is destroyed with the stretch; the native stream with the recorder, at the end of
// the capture.
//
// Following other code's capture (core/capture.hpp): where other code captures a stream that
// eventide wraps (torch.cuda.graph, CuPy's begin_capture, cudaStreamBeginCapture), the
// recorder runs the bodies on that native stream itself, into that code's graph. It keeps
// what the ops use with that graph as a CUDA user object (cudaUserObjectCreate, retained by
// the capturing graph from cudaStreamGetCaptureInfo: CUDA releases it once the graph and every
// executable graph made of it are gone, on a thread of its own), and says the capture is over
// once the stream no longer captures under that capture's id.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "core/graph_recorder.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// A recorder for a new capture on `device` (current or not). DeviceError if the stream
// cannot be made or the capture begun.
std::unique_ptr<detail::GraphRecorder> record_cuda_graph(Device device, std::string graph);
// A recorder that follows the capture other code has begun on `stream` (a stream of
// `device`, named `stream_name`), or null if the stream is not being captured (or its capture
// was invalidated).
std::unique_ptr<detail::GraphRecorder> follow_cuda_capture(Device device, cudaStream_t stream,
                                                           const std::string& stream_name);

}  // namespace eventide::backends::cuda
