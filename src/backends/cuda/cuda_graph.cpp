// Graph capture on a GPU: see backends/cuda/cuda_graph.hpp.
#include "backends/cuda/cuda_graph.hpp"

#include <memory>
#include <utility>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::Callback;
using detail::GraphStretch;

class CudaGraphStretch final : public GraphStretch {
 public:
  CudaGraphStretch(Device device, cudaGraphExec_t exec, std::shared_ptr<const std::string> graph)
      : device_(device), exec_(exec), graph_(std::move(graph)) {}
  ~CudaGraphStretch() override {
    if (memory_shut_down()) return;  // after the runtime's end (or in a fork's child)
    DeviceScope scope(device_.index(), std::nothrow);
    (void)check_nothrow(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy", "(a replay's graph)");
  }

  Callback replay_on(detail::StreamState& stream) const override {
    cudaStream_t on = as_cuda_stream(stream).handle();
    return [this, on] {
      check(cudaGraphLaunch(exec_, on), "cudaGraphLaunch", [&] { return "(a replay of " + *graph_ + ")"; });
    };
  }

 private:
  const Device device_;
  const cudaGraphExec_t exec_;
  const std::shared_ptr<const std::string> graph_;
};

class CudaGraphRecorder final : public detail::GraphRecorder {
 public:
  CudaGraphRecorder(Device device, std::string graph)
      : device_(device), graph_(std::make_shared<const std::string>(std::move(graph))) {
    DeviceScope scope(device_);
    stream_ = OwnedStream::create(device_, "for the capture of " + *graph_);
    begin();
  }

  ~CudaGraphRecorder() override {
    if (memory_shut_down()) return;  // after the runtime's end (or in a fork's child)
    DeviceScope scope(device_.index(), std::nothrow);
    if (capturing_) {
      // An abandoned capture: what it recorded is thrown away.
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_.get(), &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();  // an invalidated capture's error is not the next call's
    }
    stream_.reset("(the stream of a graph capture)");
  }

  void* native_stream() const noexcept override { return stream_.get(); }

  void add(const std::string& name, Callback body) override {
    (void)name;  // (a body's own errors name its op)
    if (!body) return;  // an op that only orders: the chain orders it
    DeviceScope scope(device_);
    body();  // records into the CUDA graph: the native stream of its launches is ours
  }

  std::unique_ptr<GraphStretch> cut(bool last) override {
    DeviceScope scope(device_);
    cudaGraph_t g = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &g);
    capturing_ = false;
    if (ended != cudaSuccess || !g) {
      (void)cudaGetLastError();
      if (g) (void)cudaGraphDestroy(g);
      throw StateError(
          *graph_ + ": CUDA's stream capture of it failed (" + describe(ended) + "): a call that "
          "stream capture forbids was made on its native stream (a synchronize or a query of it, "
          "by other code); make such calls outside the capture");
    }
    std::unique_ptr<GraphStretch> stretch;
    try {
      std::size_t nodes = 0;
      check(cudaGraphGetNodes(g, nullptr, &nodes), "cudaGraphGetNodes", [&] { return "(" + *graph_ + ")"; });
      if (nodes > 0) {
        cudaGraphExec_t exec = nullptr;
        check(cudaGraphInstantiateWithFlags(&exec, g, 0), "cudaGraphInstantiate",
              [&] { return "(" + *graph_ + ", " + std::to_string(nodes) + " nodes)"; });
        stretch = std::make_unique<CudaGraphStretch>(device_, exec, graph_);
        check(cudaGraphUpload(exec, stream_.get()), "cudaGraphUpload", [&] { return "(" + *graph_ + ")"; });
      }
    } catch (...) {
      (void)cudaGraphDestroy(g);
      throw;
    }
    (void)cudaGraphDestroy(g);
    if (!last) begin();
    return stretch;
  }

 private:
  void begin() {
    check(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture",
          [&] { return "(" + *graph_ + ")"; });
    capturing_ = true;
  }

  const Device device_;
  const std::shared_ptr<const std::string> graph_;
  OwnedStream stream_;
  bool capturing_ = false;
};

// Follows other code's capture of a native stream (see the header comment).
class FollowingCudaRecorder final : public detail::GraphRecorder {
 public:
  FollowingCudaRecorder(Device device, cudaStream_t stream, unsigned long long id, cudaGraph_t graph,
                        std::string what)
      : device_(device), stream_(stream), id_(id), graph_(graph), what_(std::move(what)) {}

  void* native_stream() const noexcept override { return stream_; }
  std::string follows() const override { return what_; }

  void add(const std::string& name, Callback body) override {
    (void)name;  // (a body's own errors name its op)
    if (!body) return;
    DeviceScope scope(device_);  // relaxed capture mode on this thread, as eventide's calls are
    body();  // into that code's graph: the stream is the one it captures
  }

  std::unique_ptr<GraphStretch> cut(bool last) override {
    if (last) return nullptr;  // that code ends its capture
    throw StateError("the " + what_ + " cannot be cut by eventide");  // (refused before: CaptureState)
  }

  bool still_open() const noexcept override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream_, &status, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return status == cudaStreamCaptureStatusActive && id == id_;
  }

  void keep_with_graph(Callback release) override {
    auto owned = std::make_unique<Callback>(std::move(release));
    DeviceScope scope(device_);
    cudaUserObject_t object = nullptr;
    check(cudaUserObjectCreate(&object, owned.get(), &FollowingCudaRecorder::released, 1,
                               cudaUserObjectNoDestructorSync),
          "cudaUserObjectCreate", [&] { return "(what eventide's ops use, kept by the " + what_ + ")"; });
    owned.release();  // the object's now: released() deletes it
    const cudaError_t kept = cudaGraphRetainUserObject(graph_, object, 1, cudaGraphUserObjectMove);
    if (kept != cudaSuccess) {
      (void)cudaUserObjectRelease(object, 1);  // released() runs: what it holds is let go
      check(kept, "cudaGraphRetainUserObject", [&] { return "(the " + what_ + ")"; });
    }
  }

 private:
  // CUDA's destructor of the user object: on a thread of CUDA's, where no CUDA call is made.
  static void CUDART_CB released(void* p) {
    auto* release = static_cast<Callback*>(p);
    (*release)();
    delete release;
  }

  const Device device_;
  const cudaStream_t stream_;
  const unsigned long long id_;
  const cudaGraph_t graph_;  // the graph being captured (that code's; valid while it captures)
  const std::string what_;
};

}  // namespace

std::unique_ptr<detail::GraphRecorder> follow_cuda_capture(Device device, cudaStream_t stream,
                                                           const std::string& stream_name) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  if (cudaStreamGetCaptureInfo(stream, &status, &id, &graph) != cudaSuccess) {
    (void)cudaGetLastError();  // (the legacy stream beside a capture: refused by the submit)
    return nullptr;
  }
  if (status != cudaStreamCaptureStatusActive || !graph) return nullptr;
  return std::make_unique<FollowingCudaRecorder>(device, stream, id, graph,
                                                 "CUDA graph capture " + std::to_string(id) + " of " + stream_name);
}

std::unique_ptr<detail::GraphRecorder> record_cuda_graph(Device device, std::string graph) {
  return std::make_unique<CudaGraphRecorder>(device, std::move(graph));
}

}  // namespace eventide::backends::cuda
