// TimerQueue: runs callables at deadlines on one thread of the runtime's (the timeouts of
// coroutine waits, eventide/coro.hpp).
//
// State of a timer: SCHEDULED --deadline passes--> RUNNING (taken out, called once) --> gone,
// or SCHEDULED --cancel()--> gone (never called). A timer is known by its Key (deadline and
// a number never reused), which cancel() takes, so that a stale key takes nothing.
//
// The thread starts with the first timer, sleeps until the earliest deadline (a futex wait on
// its Parker, absolute CLOCK_MONOTONIC time), and calls what is due in deadline order, one at a
// time, with no runtime lock held; taking a timer out to call it allocates nothing (a map
// node is moved out), so the thread has nothing that can fail for want of memory. A callable
// that throws is reported as a callback's error is, and the next one runs. What a timer calls
// should be short (it delays the timers after it): the coroutine waits hand the resumption on
// to a callback thread.
//
// Thread-safety: every member from any thread. Lifetime: the queue is the process's and never
// freed (as the runtime): shutdown() at process exit drops the timers still scheduled (their
// callables destroyed, not called) and joins the thread within the runtime's grace period.
// fork() (core/fork.hpp, ForkStage::timer, before the runtime's stage): the thread finishes
// the timer it is calling (within kForkGrace) and takes out no other, and the lock is held
// across the fork, so that a timer is called in the parent or in the child, never lost
// between them; the child, whose copy of the thread is gone, starts a new one if timers are
// scheduled. A thread that schedules or cancels a timer meanwhile (a callback withdrawing a
// wait) waits for the fork to end. Memory ordering: what schedule()'s caller did before it is
// visible to the callable (the queue's lock orders them).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "core/fork.hpp"
#include "core/parker.hpp"
#include "core/runtime_lock.hpp"
#include "core/runtime_thread.hpp"
#include "eventide/detail/callback.hpp"

namespace eventide::detail {

class TimerQueue {
 public:
  struct Key {
    Clock::time_point at;
    std::uint64_t id = 0;  // 0: no timer
    friend bool operator<(const Key& a, const Key& b) noexcept {
      return a.at != b.at ? a.at < b.at : a.id < b.id;
    }
  };

  // The process's queue, made at first use.
  static TimerQueue& get();
  // The queue if it was ever made (the runtime's shutdown asks), else null.
  static TimerQueue* existing() noexcept;

  // Calls `fn` once on the timer thread at `at` (at once if it has passed), unless cancelled
  // first. std::bad_alloc, or DeviceError if the thread cannot start (the process is at its
  // thread limit), and nothing is scheduled. StateError after shutdown().
  Key schedule(Clock::time_point at, Callback fn);
  // Takes back a timer that has not been taken out to run: true, and its callable is destroyed
  // on this thread, with no runtime lock held. False if it runs or ran, or the key is unknown.
  bool cancel(const Key& key) noexcept;

  void shutdown(Clock::time_point deadline) noexcept;

 private:
  TimerQueue() = default;
  void run();
  // Under mu_: starts the thread (std::system_error if the OS refuses).
  void start_thread_locked();
  // ForkStage::timer's steps (core/fork.hpp).
  static void before_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  void after_fork(bool child) noexcept;

  RuntimeMutex mu_;
  std::map<Key, Callback> timers_;  // under mu_
  std::uint64_t next_id_ = 1;       // under mu_
  bool stopping_ = false;           // under mu_
  bool calling_ = false;            // under mu_: the thread is calling a timer it took out
  bool forking_ = false;            // under mu_: take none out (before_fork to after_fork)
  RuntimeThread thread_;            // under mu_
  Ref<Parker> parker_ = make_ref<Parker>();
  Ref<Parker> fork_waiter_ = make_ref<Parker>();  // the forking thread, for calling_ to end
};

}  // namespace eventide::detail
