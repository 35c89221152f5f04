// Graph capture on a GPU: see backends/cuda/cuda_graph.hpp.
#include "backends/cuda/cuda_graph.hpp"

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

}  // namespace

std::unique_ptr<detail::GraphRecorder> record_cuda_graph(Device device, std::string graph) {
  return std::make_unique<CudaGraphRecorder>(device, std::move(graph));
}

}  // namespace eventide::backends::cuda
