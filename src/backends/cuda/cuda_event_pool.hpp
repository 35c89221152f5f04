// A device's pool of untimed CUDA events, lent as leases.
//
// Why a pool: without stream memory operations, progress is published by recording an event
// after every op (cuda_progress.hpp), and creating an event is a driver call: events come
// back to the pool when their op has retired and are recorded again.
//
// A lease (PooledEvent) is move-only and gives its event back when it ends; the pool keeps it
// for the next take(), or destroys it (no-throw form) where it has no room (out of memory).
// The spare events are kept as long as the pool, which lives with its device's state (never
// freed: see cuda_handles.hpp).
//
// Thread-safety: take() and the leases' ends, from any thread; the pool's lock is a leaf
// (nothing else is taken under it), so a lease may end under any other lock of the backend.
// A lease's event may be used from any thread, as CUDA allows; the lease itself is not shared.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "backends/cuda/cuda_handles.hpp"
#include "core/runtime_lock.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

class EventPool;

// An event lent by an EventPool: back to it when the lease ends. Move-only.
class PooledEvent {
 public:
  PooledEvent() noexcept = default;
  PooledEvent(PooledEvent&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), event_(std::move(other.event_)) {}
  PooledEvent& operator=(PooledEvent&& other) noexcept {
    if (this != &other) {
      give_back();
      pool_ = std::exchange(other.pool_, nullptr);
      event_ = std::move(other.event_);
    }
    return *this;
  }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;
  ~PooledEvent() { give_back(); }

  cudaEvent_t get() const noexcept { return event_.get(); }

 private:
  friend class EventPool;
  PooledEvent(EventPool& pool, OwnedEvent event) noexcept : pool_(&pool), event_(std::move(event)) {}
  void give_back() noexcept;

  EventPool* pool_ = nullptr;
  OwnedEvent event_;
};

class EventPool {
 public:
  explicit EventPool(Device device) noexcept : device_(device) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A spare event, else a new one (cudaEventDisableTiming) on the current device, which must
  // be this pool's. DeviceError if it cannot be made.
  PooledEvent take();

 private:
  friend class PooledEvent;
  // Keeps `event` for reuse; destroys it if there is no room for it.
  void give(OwnedEvent event) noexcept;

  const Device device_;
  detail::RuntimeMutex mu_;
  std::vector<OwnedEvent> spare_;
};

}  // namespace eventide::backends::cuda
