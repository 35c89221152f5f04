// The runtime's locks, and the rule they keep: a thread that holds one never releases or runs
// a user's object (a Python exception or callable, an array's or a DLPack producer's memory).
//
// Why: releasing such an object may take a lock of the user's own (Python's GIL), which
// another thread may hold while it waits for the runtime lock this thread holds: a frozen
// process (a worker folding a failed record under an event's lock dropped the last reference
// to an exception from UserEvent.fail, whose release took the GIL, while a Python thread
// holding the GIL waited for that event's lock).
//
// How it is kept, and checked: every lock of the runtime's state is a RuntimeMutex (or a
// SpinLock), which counts, per thread, the runtime locks held. The code that releases a
// user's object (the Python binding's handles) asks runtime_locks_held(); while it is not
// zero it hands the release to run_when_unlocked(), which runs it when the thread lets go of
// its last runtime lock. So whatever path drops the last reference, the user's code runs with
// no runtime lock held; deferred_releases() counts how often a path needed that.
//
// Thread-safety: the counts and the deferred work are per thread.
#pragma once

#include <cstdint>
#include <mutex>

namespace eventide::detail {

// The calling thread's count of runtime locks held. Initial-exec TLS: every runtime lock
// counts, and the general model's lookup (a call into the dynamic loader) doubled the cost of
// the short critical sections of record() and wait().
extern thread_local int tls_runtime_lock_depth [[gnu::tls_model("initial-exec")]];
// Whether run_when_unlocked() deferred something on this thread.
extern thread_local bool tls_runtime_releases_pending [[gnu::tls_model("initial-exec")]];
// Runs what run_when_unlocked() deferred on this thread.
void run_deferred_releases() noexcept;

inline void runtime_lock_entered() noexcept { ++tls_runtime_lock_depth; }
inline void runtime_lock_left() noexcept {
  if (--tls_runtime_lock_depth == 0 && tls_runtime_releases_pending) [[unlikely]] {
    run_deferred_releases();
  }
}
// How many runtime locks the calling thread holds.
inline int runtime_locks_held() noexcept { return tls_runtime_lock_depth; }
// Runs fn(arg) now if the calling thread holds no runtime lock, else when it releases its
// last one (on this thread). If that cannot be recorded (out of memory), fn is not run: the
// object is leaked rather than released under a lock.
void run_when_unlocked(void (*fn)(void*), void* arg) noexcept;
// How many releases have waited for their thread to let go of its runtime locks (tests).
std::uint64_t deferred_releases() noexcept;

class RuntimeMutex {
 public:
  void lock() {
    mu_.lock();
    runtime_lock_entered();
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
    runtime_lock_entered();
    return true;
  }
  void unlock() noexcept {
    mu_.unlock();
    runtime_lock_left();
  }

 private:
  std::mutex mu_;
};

}  // namespace eventide::detail
