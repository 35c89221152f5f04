// SpinLock: for critical sections of a few loads and stores that never block or call out
// (tensor hazards, a Work's deferred error). Cheaper than a mutex when uncontended, and never
// puts a thread to sleep. A runtime lock: it counts in runtime_locks_held() (runtime_lock.hpp).
#pragma once

#include <atomic>

#include "core/parker.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::detail {

class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) cpu_relax();
    }
    runtime_lock_entered();
  }
  void unlock() noexcept {
    flag_.store(false, std::memory_order_release);
    runtime_lock_left();
  }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace eventide::detail
