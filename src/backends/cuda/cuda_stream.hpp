// CUDA streams, their GPU-written timelines, and the watcher that turns GPU progress into
// host-side completions.
//
// Timelines on the GPU: every op enqueued on a CudaStream is followed by a stream memory
// operation (cuStreamWriteValue64) that writes the op's sequence number into the stream's
// counter, a word of pinned host memory. poll() and the waiters read it with a plain load;
// nothing asks the driver. An op that depends on another GPU stream's work makes its stream
// wait for that stream's counter on the GPU (cuStreamWaitValue64): the host is not involved.
//
// An op that depends on host-side work still running (a UserEvent, an op of the CPU) is held
// on the host instead, with every op enqueued on its stream after it, and the watcher
// launches them, in order, when that work has finished. A GPU wait on a word the host sets
// later would be quicker by a few microseconds, but it is not safe in a library: while a
// stream waits on the GPU, anything that synchronizes the device blocks too, and CUDA's lazy
// loading of a kernel's code at its first launch does (seen on the H200: cublasLtCreate hung
// while a stream waited for a UserEvent that the same thread would set next). Held work
// blocks nothing.
//
// The watcher (one thread per device) looks after what is in flight: it fires the listeners
// of timelines that have passed their fences (callbacks, waiters that sleep, CPU work waiting
// on GPU work), launches held work whose host-side dependencies have finished, retires
// finished Works (decides their errors, releases the memory they held, hands their timing to
// CUPTI), and checks the device's health when nothing moves: a sticky error (a kernel that
// trapped) fails everything in flight and held, so that nothing waits forever. It spins while
// progress comes, then backs off to sleeping.
//
// Devices without stream memory operations (device attribute, or EVENTIDE_CUDA_MEMOPS=0)
// fall back to CUDA events: each op records an event, the watcher queries them in order and
// advances the counter itself, and streams wait on each other's events (cudaStreamWaitEvent).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_memory.hpp"
#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/runtime_thread.hpp"
#include "core/stream_state.hpp"
#include "core/timeline.hpp"

namespace eventide::backends::cuda {

using detail::Work;

class CudaDevice;
class CudaStream;

class CudaTimeline final : public detail::Timeline {
 public:
  CudaTimeline(std::string name, CudaDevice& device, PinnedWord word);
  ~CudaTimeline() override;

  CUdeviceptr counter_address() const noexcept { return word_.device; }
  CudaDevice& device() const noexcept { return device_; }
  void await_timing(Work& work) override;
  void await_timings(std::span<Work* const> works) override;
  // CUPTI's clock (or, with event pairs, the device's reference event) to the host's.
  std::int64_t to_host_ns(std::int64_t device_ns) const noexcept override;

 protected:
  void listener_added() noexcept override;

 private:
  CudaDevice& device_;
  PinnedWord word_;
};

class CudaStream final : public detail::StreamState {
 public:
  // A new stream, owned (destroyed with this).
  CudaStream(Device device, std::uint64_t id, CudaDevice& owner);
  // A stream over `native`, which someone else owns (not destroyed here); `what` says whose
  // ("wrapped", "legacy default stream", ...), for its name.
  CudaStream(Device device, std::uint64_t id, CudaDevice& owner, cudaStream_t native,
             std::string what);
  ~CudaStream() override;

  cudaStream_t handle() const noexcept { return handle_; }
  // Device scratch memory of `bytes` for library calls on this stream (cuBLASLt), allocated
  // at first use and kept with the stream.
  detail::Ref<Storage> workspace(std::size_t bytes);
  CudaDevice& owner() const noexcept { return owner_; }
  std::exception_ptr device_error() const override;
  void* native_handle() const noexcept override { return handle_; }

  // For the watcher: launches held work whose host-side dependencies have finished.
  void release_if_due() noexcept;
  // For the watcher: retires what has finished; true if work is still in flight or held.
  bool retire() noexcept;
  // Fails everything in flight and held with `error` and advances the timeline past it
  // (device lost).
  void abandon(const std::exception_ptr& error) noexcept;
  // cudaStreamQuery: a sticky error shows here first.
  cudaError_t query_native() const noexcept { return cudaStreamQuery(handle_); }

 protected:
  void submit(detail::Ref<Work> work) noexcept override;
  bool native_idle() const noexcept override;
  void check_submit() const override;

 private:
  struct InFlight {
    detail::Ref<Work> work;
    cudaEvent_t done = nullptr;  // fallback mode: recorded after the op
  };
  friend class ReleaseListener;

  // The first dependency of `work` that the GPU cannot wait for: host-side work that has not
  // finished, or (in the event fallback) GPU work not launched yet, which has no event to
  // wait on. Null if none.
  const detail::Dep* host_wait(const Work& work) noexcept;
  // Has the watcher release held work when the host-side work the first held op waits for
  // finishes. Under launch_mu_.
  void hold_until_ready() noexcept;
  // Launches `work` on the GPU after what it depends on there. Under launch_mu_. Returns the
  // device's failure if the launch found one (the caller reports it once unlocked).
  std::exception_ptr launch_locked(detail::Ref<Work> work) noexcept;
  void order_after(const detail::Dep& dep, bool& decided_later);
  void publish(InFlight& entry);
  void ensure_watched() noexcept;

  CudaDevice& owner_;
  cudaStream_t handle_ = nullptr;
  bool owns_handle_ = true;
  // The per-thread default stream is a different stream on each thread: a wrapper of it is
  // the one of the thread that made it, and only that thread may enqueue on it.
  bool per_thread_ = false;
  std::thread::id thread_;
  CudaTimeline& timeline_;

  std::mutex workspace_mu_;
  detail::Ref<Storage> workspace_;

  // Launches are serialized (submit's direct ones and the watcher's releases) in seq order.
  detail::RuntimeMutex launch_mu_;
  std::deque<detail::Ref<Work>> held_;
  std::atomic<std::size_t> held_count_{0};
  std::atomic<bool> release_due_{false};
  std::uint64_t last_seq_ = 0;  // the last work submitted (held or launched)

  detail::RuntimeMutex inflight_mu_;
  std::deque<InFlight> inflight_;
  // The sequence number of the oldest work in flight (kNoneInFlight: none), for retire()'s
  // look without the lock. Written under inflight_mu_.
  static constexpr std::uint64_t kNoneInFlight = ~std::uint64_t{0};
  std::atomic<std::uint64_t> oldest_inflight_{kNoneInFlight};
  bool watched_ = false;  // the watcher has this stream on its list
};

// Per-device state shared by its streams.
class CudaDevice {
 public:
  explicit CudaDevice(Device device);

  Device device() const noexcept { return device_; }
  const cudaDeviceProp& props() const noexcept { return props_; }
  bool mem_ops() const noexcept { return mem_ops_; }

  // The device's sticky error once it has failed, else null.
  std::exception_ptr broken() const;
  // Records a failure of the device (sticky error) and abandons all work in flight.
  void mark_broken(std::exception_ptr error) noexcept;

  // Watcher interface.
  void watch(std::shared_ptr<CudaStream> stream);
  // Something to look at (new work, a listener, held work to release): the watcher spins
  // again instead of backing off.
  void wake() noexcept {
    wakes_.fetch_add(1, std::memory_order_release);
    parker_->unpark();
  }
  // Stops the watcher, waiting for it until `deadline`.
  void stop(detail::Clock::time_point deadline) noexcept;

  // Fallback mode: the event recorded after `work`, if it is still in flight.
  cudaEvent_t done_event(const Work& work);
  void set_done_event(const Work& work, cudaEvent_t event);
  void forget_done_event(const Work& work);
  cudaEvent_t take_event();
  void give_event(cudaEvent_t event) noexcept;

 private:
  void run() noexcept;
  void check_health() noexcept;

  const Device device_;
  cudaDeviceProp props_{};
  bool mem_ops_ = false;

  mutable detail::RuntimeMutex mu_;
  std::exception_ptr broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set: broken()'s look without mu_
  std::vector<std::shared_ptr<CudaStream>> watched_;
  std::atomic<std::uint64_t> watched_version_{0};  // bumped (under mu_) when watched_ changes
  std::unordered_map<const Work*, cudaEvent_t> done_events_;
  std::vector<cudaEvent_t> spare_events_;

  detail::Ref<detail::Parker> parker_ = detail::make_ref<detail::Parker>();
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> wakes_{0};
  detail::RuntimeThread thread_;
};

}  // namespace eventide::backends::cuda
