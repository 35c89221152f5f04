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
// An op that depends on host-side work still running (a UserEvent, an op of the CPU) is held
// on the host instead, with every op enqueued on its stream after it, and the watcher
// launches them, in order, when that work has finished. A GPU wait on a word the host sets
// later would be quicker by a few microseconds, but it is not safe in a library: while a
// stream waits on the GPU, anything that synchronizes the device blocks too, and CUDA's lazy
// loading of a kernel's code at its first launch does (seen on the H200: cublasLtCreate hung
// while a stream waited for a UserEvent that the same thread would set next). Held work
// blocks nothing.
//
// The device's watcher (cuda_watcher.hpp) looks after what is in flight: it launches held
// work whose host-side dependencies have finished (release_if_due), retires finished Works
// (retire: decides their errors, releases the memory they held, hands their timing to
// CUPTI), and fails everything in flight and held when the device fails (abandon).
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
#include <span>
#include <string>
#include <thread>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/timeline.hpp"

namespace eventide::backends::cuda {

using detail::Work;

// A first-in first-out list of Works linked through Work::next, holding a reference to each:
// pushing and popping allocate nothing. A Work is in one such list at a time. Not
// thread-safe.
class WorkList {
 public:
  WorkList() noexcept = default;
  WorkList(const WorkList&) = delete;
  WorkList& operator=(const WorkList&) = delete;
  ~WorkList() {
    while (pop_front()) {
    }
  }
  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  Work* front() const noexcept { return head_; }  // then w->next
  void push_back(detail::Ref<Work> work) noexcept {
    Work* w = work.detach();
    w->next = nullptr;
    (tail_ ? tail_->next : head_) = w;
    tail_ = w;
    ++size_;
  }
  detail::Ref<Work> pop_front() noexcept {
    Work* w = head_;
    if (!w) return nullptr;
    head_ = w->next;
    if (!head_) tail_ = nullptr;
    w->next = nullptr;
    --size_;
    detail::Ref<Work> taken(w);  // adopts the list's reference:
    w->release();                // Ref's constructor added one
    return taken;
  }
  void swap(WorkList& other) noexcept {
    std::swap(head_, other.head_);
    std::swap(tail_, other.tail_);
    std::swap(size_, other.size_);
  }

 private:
  Work* head_ = nullptr;
  Work* tail_ = nullptr;
  std::size_t size_ = 0;
};

class CudaTimeline final : public detail::Timeline {
 public:
  CudaTimeline(std::string name, CudaDevice& device, PinnedWord word);

  CUdeviceptr counter_address() const noexcept { return word_.device(); }
  CudaDevice& device() const noexcept { return device_; }
  void await_timing(Work& work) override;
  void await_timings(std::span<Work* const> works) override;
  // CUPTI's clock (or, with event pairs, the device's reference event) to the host's.
  std::int64_t to_host_ns(std::int64_t device_ns) const noexcept override;

 protected:
  void listener_added() noexcept override;

 private:
  CudaDevice& device_;
  PinnedWord word_;  // the counter: back to its pool with the timeline
};

// What OwnedCudaStream and WrappedCudaStream share: everything but who owns the native
// stream.
class CudaStream : public detail::StreamState {
 public:
  ~CudaStream() override;

  cudaStream_t handle() const noexcept { return native_.get(); }
  // Device scratch memory of `bytes` for library calls on this stream (cuBLASLt), allocated
  // at first use and kept with the stream.
  detail::Ref<Storage> workspace(std::size_t bytes);
  CudaDevice& owner() const noexcept { return owner_; }
  std::exception_ptr device_error() const override;
  void* native_handle() const noexcept override { return native_.get(); }
  void mark_exposed() noexcept override { may_capture_.store(true, std::memory_order_relaxed); }
  bool launches_from_any_thread() const noexcept override { return !per_thread_; }

  // StateError if the native stream is being captured into a CUDA graph (and others may use
  // it): nothing of eventide's goes into a capture.
  void check_not_capturing() const;
  // For the watcher: launches held work whose host-side dependencies have finished.
  void release_if_due() noexcept;
  // For the watcher: retires what has finished; true if work is still in flight or held.
  bool retire() noexcept;
  // Fails everything in flight and held with `error` and advances the timeline past it
  // (device lost).
  void abandon(const std::exception_ptr& error) noexcept;
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

  void submit(detail::Ref<Work> work) noexcept override;
  bool native_idle() const noexcept override;
  void check_submit() const override;

 private:
  friend class ReleaseListener;

  // The first dependency of `work` that the GPU cannot wait for: host-side work that has not
  // finished, or GPU work whose device's progress this stream cannot wait on (in the events'
  // strategy: not launched yet, so without an event). Null if none.
  const detail::Dep* host_wait(const Work& work) noexcept;
  // Has the watcher release held work when the host-side work the first held op waits for
  // finishes. Under launch_mu_.
  void hold_until_ready() noexcept;
  // Launches `work` on the GPU after what it depends on there. Under launch_mu_. Returns the
  // device's failure if the launch found one (the caller reports it once unlocked).
  std::exception_ptr launch_locked(detail::Ref<Work> work) noexcept;
  // Orders this stream after `dep` on the GPU; sets `decided_later` if its failure can only
  // be known once it has finished.
  void order_after(const detail::Dep& dep, bool& decided_later);
  // Puts the stream on the watcher's list (it was not: the caller set watched_ under
  // inflight_mu_), or wakes the watcher.
  void ensure_watched() noexcept;
  void watch_or_wake(bool newly_watched) noexcept;

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

  std::mutex workspace_mu_;
  detail::Ref<Storage> workspace_;

  // Launches are serialized (submit's direct ones and the watcher's releases) in seq order.
  detail::RuntimeMutex launch_mu_;
  WorkList held_;
  std::atomic<std::size_t> held_count_{0};
  std::atomic<bool> release_due_{false};
  std::uint64_t last_seq_ = 0;  // the last work submitted (held or launched)

  detail::RuntimeMutex inflight_mu_;
  WorkList inflight_;
  // The sequence number of the oldest work in flight (kNoneInFlight: none), for retire()'s
  // look without the lock. Written under inflight_mu_.
  static constexpr std::uint64_t kNoneInFlight = ~std::uint64_t{0};
  std::atomic<std::uint64_t> oldest_inflight_{kNoneInFlight};
  bool watched_ = false;  // the watcher has this stream on its list
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
