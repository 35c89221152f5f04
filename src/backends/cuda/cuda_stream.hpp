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
  // Fallback mode records the event after the op into the device's map (done_event).
  void publish(Work& work);
  void ensure_watched() noexcept;

  CudaDevice& owner_;
  // Counts the stream in its device's room for the watcher's list (CudaDevice::add_stream)
  // while it lives, also when a later part of the constructor throws.
  struct StreamSlot {
    explicit StreamSlot(CudaDevice& device);
    ~StreamSlot();
    StreamSlot(const StreamSlot&) = delete;
    StreamSlot& operator=(const StreamSlot&) = delete;
    CudaDevice& device;
  };
  StreamSlot slot_{owner_};
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

// Per-device state shared by its streams.
class CudaDevice {
 public:
  explicit CudaDevice(Device device);

  // A stream of the device is made (throws std::bad_alloc) / destroyed: the watcher's list
  // keeps room for every stream, so that watch() allocates nothing.
  void add_stream();
  void remove_stream() noexcept;
  // Starts the watcher if it has not started (std::system_error, std::bad_alloc): before the
  // first submit, so that watch() never has to start it where nothing may fail.
  void ensure_watcher();

  Device device() const noexcept { return device_; }
  const cudaDeviceProp& props() const noexcept { return props_; }
  bool mem_ops() const noexcept { return mem_ops_; }

  // The device's sticky error once it has failed, else null.
  std::exception_ptr broken() const;
  // Records a failure of the device (sticky error) and abandons all work in flight.
  void mark_broken(std::exception_ptr error) noexcept;

  // Watcher interface. Allocates nothing (see add_stream, ensure_watcher).
  void watch(std::shared_ptr<CudaStream> stream) noexcept;
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
  // Calls fn(stream) for each watched stream, taking each under mu_ in turn (no copy of the
  // list: it runs where nothing may fail).
  template <class Fn>
  void for_each_watched(Fn&& fn) noexcept;

  const Device device_;
  cudaDeviceProp props_{};
  bool mem_ops_ = false;

  mutable detail::RuntimeMutex mu_;
  std::exception_ptr broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set: broken()'s look without mu_
  // A stream may be on it twice for a moment (see run()): room for two entries per stream.
  std::vector<std::shared_ptr<CudaStream>> watched_;
  // Streams of the device alive (add_stream). Atomic: remove_stream() runs in ~CudaStream,
  // which may run where mu_ is held (the last reference to a stream dropped by the watcher's
  // list), so it must not take mu_.
  std::atomic<std::size_t> streams_{0};
  std::atomic<std::uint64_t> watched_version_{0};  // bumped (under mu_) when watched_ changes
  std::unordered_map<const Work*, cudaEvent_t> done_events_;
  std::vector<cudaEvent_t> spare_events_;

  detail::Ref<detail::Parker> parker_ = detail::make_ref<detail::Parker>();
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> wakes_{0};
  detail::RuntimeThread thread_;
};

}  // namespace eventide::backends::cuda
