// DeviceWatcher: one thread per device that turns a device's progress into host-side
// completions, the turns of the device-stream engine (device_stream.hpp), written once for
// every backend whose device runs its work itself.
//
// It looks after the streams that have work in flight or held (its list): it fires the
// listeners of timelines that have passed their fences (callbacks, waiters that sleep, CPU
// work waiting for device work), launches held work whose host-side dependencies have
// finished (DeviceStream::release_if_due), retires finished Works (DeviceStream::retire), and
// asks the backend to check the device's health when nothing moves for kHealthCheckAfter (a
// GPU's sticky error: check_health() marks the device broken, which fails everything in
// flight and held).
//
// Pacing: it spins while progress comes, then backs off to sleeping (doubling up to a limit);
// any new work or listener (wake()) makes it spin again. While a listener is registered it
// spins longer and sleeps less, so that a wait on long GPU work learns of its end promptly.
//
// State: not started, running (started by ensure_started() before the first submit, so that
// watch() never has to start it where nothing may fail), stopped (stop(): at process exit).
//
// What a backend adds (the hooks below): what its thread does first (on_thread_start), the
// upkeep of each turn (maintain), the health check, and its thread's name.
//
// Thread-safety: every member, from any thread. Its lock (mu_) guards the list and the
// thread; a stream is never destroyed under it (the last reference to a stream its user has
// dropped may be the list's: see run()), and remove_stream() does not take it, since it runs
// in a stream's destructor, which may run where mu_ is held. A backend's watcher stops the
// thread (stop()) before it is destroyed: the thread calls its hooks.
//
// Out of memory: watch() and the loop allocate nothing that could fail: the list keeps room
// for every stream alive (add_stream reserves it when a stream is made).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/parker.hpp"
#include "core/ref.hpp"
#include "core/runtime_lock.hpp"
#include "core/runtime_thread.hpp"

namespace eventide::detail {

class DeviceStream;

class DeviceWatcher {
 public:
  // `thread_name`: the thread's (pthread_setname_np: at most 15 characters).
  explicit DeviceWatcher(const char* thread_name) noexcept : thread_name_(thread_name) {}
  virtual ~DeviceWatcher() = default;
  DeviceWatcher(const DeviceWatcher&) = delete;
  DeviceWatcher& operator=(const DeviceWatcher&) = delete;

  // A stream of the device is made (throws std::bad_alloc) / destroyed: the list keeps room
  // for every stream, so that watch() allocates nothing.
  void add_stream();
  void remove_stream() noexcept;
  // Starts the thread if it has not started (std::system_error, std::bad_alloc): before the
  // first submit, so that watch() never has to start it where nothing may fail.
  void ensure_started();

  // Puts `stream` (with work in flight or held) on the list. Allocates nothing.
  void watch(std::shared_ptr<DeviceStream> stream) noexcept;
  // Something to look at (new work, a listener, held work to release): the watcher spins
  // again instead of backing off.
  void wake() noexcept {
    wakes_.fetch_add(1, std::memory_order_release);
    parker_->unpark();
  }
  // A look soon, not taken for progress (DeviceEngine::demanded).
  void look_soon() noexcept { parker_->unpark(); }
  // New work on a stream on the list (DeviceEngine::nudge): wake() unless the thread is
  // turning without sleeping, in which case it sees the launch itself (DeviceStream::
  // launched_since_look) and takes it for progress. A launch so costs a fence and a load of a
  // word the thread writes only when it goes to sleep or wakes, not two read-modify-writes
  // of words the spinning thread reads on every turn.
  void nudge() noexcept {
    // Pairs with the thread's store of spinning_ before it looks at the streams a last time
    // and sleeps: either it sees this launch, or this sees that it may sleep.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!spinning_.load(std::memory_order_relaxed)) wake();
  }
  // Fails everything in flight and held on the listed streams with `error` (the device is
  // lost).
  void abandon_all(const std::exception_ptr& error) noexcept;
  // fork(): holds the watcher between two turns until resume_after_fork (parent) or
  // forget_after_fork (child), so that no lock a turn takes (the list's, a stream's, the
  // timing's) is held by it at the fork: the child would find it taken forever. Gives up at
  // `deadline` (a turn that does not end: a callback waiting for the forking thread), and
  // does nothing on the watcher's own thread (a callback that forks).
  void pause_for_fork(Clock::time_point deadline) noexcept;
  void resume_after_fork() noexcept;
  void forget_after_fork() noexcept;  // in the child: the thread is gone, the pause with it
  // Stops the thread, waiting for it until `deadline` (then it is left running: see
  // RuntimeThread).
  void stop(Clock::time_point deadline) noexcept;

 protected:
  // The backend's hooks, called on the watcher's thread. First, before any turn (a GPU's
  // thread settings, the start of its device).
  virtual void on_thread_start() noexcept {}
  // At the end of every turn that looked at streams (a timing's upkeep).
  virtual void maintain() noexcept {}
  // When nothing has moved for kHealthCheckAfter with work in flight: whether the device has
  // failed (a sticky error), which the backend then reports (DeviceEngine::mark_broken).
  virtual void check_health() noexcept {}
  // Calls fn(stream) for each listed stream, taking each under mu_ in turn (no copy of the
  // list: it runs where nothing may fail).
  template <class Fn>
  void for_each_watched(Fn&& fn) noexcept;

 private:
  void run() noexcept;

  const char* const thread_name_;
  mutable RuntimeMutex mu_;
  // A stream may be on it twice for a moment (see run()): room for two entries per stream.
  std::vector<std::shared_ptr<DeviceStream>> watched_;
  // Streams of the device alive (add_stream). Atomic: remove_stream() runs in a stream's destructor,
  // which may run where mu_ is held (the last reference to a stream dropped by the list), so
  // it must not take mu_.
  std::atomic<std::size_t> streams_{0};
  std::atomic<std::uint64_t> watched_version_{0};  // bumped (under mu_) when watched_ changes

  // Held by the thread through each turn of its loop (not while it sleeps or spins), and by
  // pause_for_fork across a fork. While the thread holds it, it counts as a runtime lock
  // (runtime_lock.hpp): what a turn releases of a user's objects waits for the turn's end, so
  // that a forking thread holding the GIL never waits for a turn that waits for the GIL.
  std::timed_mutex turn_mu_;
  // Set while a fork wants the turn lock: the thread does not take it again meanwhile (it
  // would win every race for it against a thread woken from a wait).
  std::atomic<bool> fork_wants_turn_{false};
  bool fork_paused_ = false;  // the forking thread's: pause_for_fork got turn_mu_
  std::atomic<std::thread::id> thread_id_{};  // the watcher's thread, once it runs
  Ref<Parker> parker_ = make_ref<Parker>();
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};  // ensure_started has started the thread
  std::atomic<std::uint64_t> wakes_{0};
  // The thread turns and will look at its streams again without sleeping first (nudge()).
  std::atomic<bool> spinning_{false};
  RuntimeThread thread_;
};

template <class Fn>
void DeviceWatcher::for_each_watched(Fn&& fn) noexcept {
  // One at a time under mu_: a stream added or removed meanwhile may be seen or missed once.
  for (std::size_t i = 0;; ++i) {
    std::shared_ptr<DeviceStream> s;
    {
      std::lock_guard lock(mu_);
      if (i >= watched_.size()) return;
      s = watched_[i];
    }
    fn(*s);
  }
}

}  // namespace eventide::detail
