// CUDA streams and their GPU-written timelines.
//
// Timelines on the GPU: every op enqueued on a CudaStream is followed by the publication of
// its end (cuda_progress.hpp: a stream memory operation, cuStreamWriteValue64, that writes
// the op's sequence number into the stream's counter, a word of pinned host memory; or, on
// devices without them, a CUDA event). poll() and the waiters read the counter with a plain
// load; nothing asks the driver. An op that depends on another GPU stream's work makes its
// stream wait for that work on the GPU (cuStreamWaitValue64 on the other's counter, or
// cudaStreamWaitEvent): the host is not involved.
//
// The protocol (holding work behind host-side dependencies, ordered launch, late errors,
// retiring, abandoning) is the core's device-stream engine (core/device_stream.hpp):
// CudaStream implements its native interface with CUDA calls, and the device's watcher
// (cuda_watcher.hpp) takes its turns. Held work waits on the host, never on the GPU for a word
// the host sets later: while a stream waits on the GPU, anything that synchronizes the device
// blocks too, and CUDA's lazy loading of a kernel's code at its first launch does (seen on
// the H200: cublasLtCreate hung while a stream waited for a UserEvent that the same thread
// would set next). Until the device has started (CudaDevice::begin_start: CUPTI and the
// kernels' code), work with a body is held as well.
//
// Ownership: the native stream of an OwnedCudaStream (Stream(device)) is made with it and
// destroyed with it; a WrappedCudaStream (Stream::from_native) uses one that someone else
// owns and never destroys it. The timeline's counter is a PinnedWord lease, back to its pool
// with the timeline.
//
// Out of memory (host): submit(), the launches and the watcher are noexcept, and allocate
// nothing that could fail there: held and in-flight work are lists linked through the Works
// (Work::next), the watcher's list has room for every stream (reserved when a stream is made)
// and its thread is started before the first submit (check_submit); a release listener that
// cannot be allocated makes the watcher look at the held work on each of its turns instead.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "core/runtime_lock.hpp"
#include "core/device_stream.hpp"
#include "core/stream_state.hpp"
#include "core/timeline.hpp"

namespace eventide::backends::cuda {

using detail::Work;

class CudaTimeline final : public detail::DeviceTimeline {
 public:
  CudaTimeline(std::string name, CudaDevice& device, PinnedWord word);

  CUdeviceptr counter_address() const noexcept { return word_.device(); }
  CudaDevice& device() const noexcept { return device_; }
  void await_timing(Work& work) override;
  void await_timings(std::span<Work* const> works) override;
  // CUPTI's clock (or, with event pairs, the device's reference event) to the host's.
  std::int64_t to_host_ns(std::int64_t device_ns) const noexcept override;

 private:
  CudaDevice& device_;
  PinnedWord word_;  // the counter: back to its pool with the timeline
};

// What OwnedCudaStream and WrappedCudaStream share: everything but who owns the native
// stream.
class CudaStream : public detail::DeviceStream {
 public:
  ~CudaStream() override;

  cudaStream_t handle() const noexcept { return native_.get(); }
  // The native stream an op's body launches on: handle(), but in a graph capture the
  // capture's own stream, which records what is launched there (backends/cuda/cuda_graph.hpp).
  cudaStream_t launch_handle() const noexcept {
    if (void* captured = capture_native()) [[unlikely]] return static_cast<cudaStream_t>(captured);
    return native_.get();
  }
  // launch_handle() and the capture epoch it belongs to (ops::Body::capture_epoch), read first,
  // so that a body made for a capture that has since ended is refused, not launched there.
  struct LaunchTarget {
    cudaStream_t stream;
    std::uint64_t epoch;
  };
  LaunchTarget launch_target() const noexcept {
    const std::uint64_t epoch = capture_epoch();
    return {launch_handle(), epoch};
  }
  // Device scratch memory of `bytes` for library calls on this stream (cuBLASLt), allocated
  // at first use and kept with the stream.
  detail::Ref<Storage> workspace(std::size_t bytes);
  CudaDevice& owner() const noexcept { return owner_; }
  std::exception_ptr device_error() const override;
  void* native_handle() const noexcept override { return native_.get(); }
  // From now on other code may capture the native stream: no publication is left for later.
  void mark_exposed() noexcept override {
    if (!may_capture_.exchange(true, std::memory_order_relaxed)) publish_now();
  }
  bool launches_from_any_thread() const noexcept override { return !per_thread_; }

  // StateError if the native stream is being captured into a CUDA graph by other code, unless
  // the stream follows that capture (core/capture.hpp): nothing else of eventide's goes there.
  void check_not_capturing() const;
  // Whether the stream follows other code's capture of its native stream.
  bool follows_native_capture() const noexcept {
    void* captured = capture_native();
    return captured && captured == static_cast<void*>(native_.get());
  }
  // Device memory for an op on this stream: in the stream's order, but, while it follows
  // other code's capture, usable at once by any stream (the graph's, used at its replays).
  detail::Ref<Storage> allocate(std::size_t bytes);
  // cudaStreamQuery: a sticky error shows here first. cudaSuccess for a stream being captured
  // (a query would invalidate the capture).
  cudaError_t query_native() const noexcept {
    return may_capture_.load(std::memory_order_relaxed) && capturing(native_.get()) ? cudaSuccess
                                                                                   : cudaStreamQuery(native_.get());
  }

 protected:
  // `timeline_name`: "cuda:0 stream 3", with what the native stream is for a wrapped one;
  // `native`: the native stream (null for an owned one until it has made it: bind()).
  CudaStream(Device device, std::uint64_t id, CudaDevice& owner, std::string timeline_name,
             StreamRef native);
  // Sets the native stream, once, in the constructor of an owned stream.
  void bind(StreamRef native) noexcept { native_ = native; }

  bool native_idle() const noexcept override;
  bool may_be_captured() const noexcept override { return may_capture_.load(std::memory_order_relaxed); }
  std::unique_ptr<detail::GraphRecorder> follow_native_capture() override;
  void check_submit() const override;

  // The engine's native interface, with CUDA calls.
  // Holds work with a body until the device has started (CUPTI, the kernels' code), then as
  // the engine does; a dependency on another device's work is waited for on the GPU where the
  // producer's progress strategy lets this stream (ProgressPublisher::can_wait_on_gpu).
  const detail::Dep* host_wait(const Work& work) noexcept override;
  bool can_wait_on_device(const Work& producer) noexcept override;
  void wait_on_device(const Work& producer) override;
  bool device_wait_reads_publication(const Work& producer) noexcept override;
  void begin_launch() override { scope_.emplace(device()); }
  void end_launch() noexcept override { scope_.reset(); }
  void launch_body(Work& work) override;
  void launch_marker(Work& work) override;
  void end_work(Work& work) override;
  bool can_publish_later() const noexcept override;
  void publish_through(std::uint64_t seq) override;
  std::exception_ptr unholdable(const Work& work, const detail::Dep& dep) noexcept override;
  bool device_writes_counter() const noexcept override;
  std::uint64_t finished_through(std::uint64_t completed, const WorkList& inflight) noexcept override;
  void reached(std::uint64_t seq) noexcept override;
  void retired(Work& work) noexcept override;

 private:
  CudaDevice& owner_;
  // Counts the stream in its device's room for the watcher's list (Watcher::add_stream)
  // while it lives, also when a later part of the constructor throws.
  struct StreamSlot {
    explicit StreamSlot(CudaDevice& device);
    ~StreamSlot();
    StreamSlot(const StreamSlot&) = delete;
    StreamSlot& operator=(const StreamSlot&) = delete;
    CudaDevice& device;
  };
  StreamSlot slot_{owner_};
  StreamRef native_;
  // Whether code other than eventide's may use the native stream, and so capture it: a wrapped
  // one always, an owned one once its handle was handed out. Only then does a submit ask CUDA
  // whether the stream is being captured (cudaStreamIsCapturing: ~0.1 µs on the H200).
  std::atomic<bool> may_capture_;
  // The per-thread default stream is a different stream on each thread: a wrapper of it is
  // the one of the thread that made it, and only that thread may enqueue on it.
  const bool per_thread_;
  const std::thread::id thread_;
  CudaTimeline& timeline_;
  // The device made current over a launch's steps (begin_launch to end_launch, under the
  // engine's launch lock).
  std::optional<DeviceScope> scope_;

  std::mutex workspace_mu_;
  detail::Ref<Storage> workspace_;
};

// The CUDA stream behind a stream of a CUDA device.
inline CudaStream& as_cuda_stream(detail::StreamState& stream) noexcept {
  return static_cast<CudaStream&>(stream);
}

// A stream eventide made (Stream(device)): a non-blocking native stream, made with it and
// destroyed with it (once the watcher has let go of it, so with nothing of eventide's left in
// flight; work other code queued on the native handle completes first).
class OwnedCudaStream final : public CudaStream {
 public:
  // DeviceError if the native stream cannot be made. `priority`: within the device's range.
  OwnedCudaStream(Device device, std::uint64_t id, CudaDevice& owner, int priority = 0);
  ~OwnedCudaStream() override;
  int priority() const noexcept override { return priority_; }

 private:
  OwnedStream own_;
  const int priority_;
};

// A stream over `native`, which someone else owns (Stream::from_native): never destroyed
// here. `what` says whose ("wrapped", "legacy default stream", ...), for its name.
class WrappedCudaStream final : public CudaStream {
 public:
  WrappedCudaStream(Device device, std::uint64_t id, CudaDevice& owner, StreamRef native,
                    const std::string& what);
  // The native stream's own (cudaStreamGetPriority when it was wrapped).
  int priority() const noexcept override { return priority_; }

 private:
  int priority_ = 0;
};

}  // namespace eventide::backends::cuda
