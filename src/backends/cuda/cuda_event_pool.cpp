#include "backends/cuda/cuda_event_pool.hpp"

#include <mutex>

namespace eventide::backends::cuda {

void PooledEvent::give_back() noexcept {
  if (EventPool* pool = std::exchange(pool_, nullptr); pool && event_.get()) {
    pool->give(std::move(event_));
  }
}

PooledEvent EventPool::take() {
  {
    std::lock_guard lock(mu_);
    if (!spare_.empty()) {
      OwnedEvent e = std::move(spare_.back());
      spare_.pop_back();
      return PooledEvent(*this, std::move(e));
    }
  }
  return PooledEvent(*this, OwnedEvent::create(cudaEventDisableTiming, "on " + device_.str()));
}

void EventPool::give(OwnedEvent event) noexcept {
  std::lock_guard lock(mu_);
  try {
    spare_.push_back(std::move(event));
  } catch (...) {
    // Out of memory for the list: `event` is destroyed when it goes out of scope.
  }
}

}  // namespace eventide::backends::cuda
