// SpinLock: for critical sections of a few loads and stores that never block or call out
// (tensor hazards, a Work's deferred error). Cheaper than a mutex when uncontended, and never
// puts a thread to sleep.
#pragma once

#include <atomic>

#include "core/parker.hpp"

namespace eventide::detail {

class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace eventide::detail
