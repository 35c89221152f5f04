#include "core/timer.hpp"

#include <pthread.h>

#include <atomic>
#include <exception>
#include <string>
#include <system_error>

#include "core/dispatcher.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"

namespace eventide::detail {

namespace {
std::atomic<TimerQueue*> g_queue{nullptr};
TimerQueue* g_held_for_fork = nullptr;  // the forking thread's: before_fork to after_fork
thread_local bool tls_on_timer_thread = false;
}  // namespace

TimerQueue& TimerQueue::get() {
  // Leaked on purpose, like the runtime: a handle that outlives the exit may still cancel.
  static TimerQueue* queue = [] {
    auto* q = new TimerQueue();
    g_queue.store(q, std::memory_order_release);
    set_fork_steps(ForkStage::timer, {&before_fork, &after_fork_in_parent, &after_fork_in_child});
    return q;
  }();
  return *queue;
}

TimerQueue* TimerQueue::existing() noexcept { return g_queue.load(std::memory_order_acquire); }

TimerQueue::Key TimerQueue::schedule(Clock::time_point at, Callback fn) {
  Key key;
  bool first;
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw StateError("cannot start a timer: the runtime has shut down (process exit)");
    if (!thread_.joinable()) {
      try {
        start_thread_locked();
      } catch (const std::system_error& e) {
        throw DeviceError(std::string("cannot start the runtime's timer thread (") + e.what() +
                              "): the process is at its thread limit",
                          "pthread_create", e.code().value());
      }
    }
    key = Key{at, next_id_++};
    timers_.emplace(key, std::move(fn));  // std::bad_alloc: nothing scheduled, fn not moved from
    first = timers_.begin()->first.id == key.id;
  }
  if (first) parker_->unpark();  // the thread sleeps until a later deadline, or for ever
  return key;
}

bool TimerQueue::cancel(const Key& key) noexcept {
  if (key.id == 0) return false;
  Callback taken;  // a user's object: destroyed after the lock is let go
  {
    std::lock_guard lock(mu_);
    auto it = timers_.find(key);
    if (it == timers_.end()) return false;
    taken = std::move(it->second);
    timers_.erase(it);
  }
  return true;
}

void TimerQueue::start_thread_locked() { thread_ = RuntimeThread([this] { run(); }); }

void TimerQueue::run() {
  pthread_setname_np(pthread_self(), "eventide-timer");
  tls_on_timer_thread = true;
  for (;;) {
    Callback fn;
    Deadline sleep_until;  // none: until a schedule() or a fork's end wakes it
    {
      std::lock_guard lock(mu_);
      if (calling_) {
        calling_ = false;
        if (forking_) fork_waiter_->unpark();  // before_fork waits for this
      }
      if (stopping_) return;
      if (!forking_ && !timers_.empty()) {
        if (timers_.begin()->first.at <= Clock::now()) {
          // Moved out of its node: nothing allocated, so nothing here can fail.
          fn = std::move(timers_.extract(timers_.begin()).mapped());
          calling_ = true;
        } else {
          sleep_until = timers_.begin()->first.at;
        }
      }
    }
    if (!fn) {
      parker_->park(sleep_until);
      continue;
    }
    try {
      fn();
    } catch (...) {
      report_callback_error(std::current_exception(), std::string_view("a timer"));
    }
    fn = Callback();  // destroyed here, unlocked: it may own anything
  }
}

void TimerQueue::shutdown(Clock::time_point deadline) noexcept {
  std::map<Key, Callback> dropped;  // destroyed unlocked, after the thread has been told
  RuntimeThread thread;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(timers_);
    thread = std::move(thread_);
  }
  parker_->unpark();
  thread.join_until(deadline);
}

void TimerQueue::before_fork() noexcept {
  TimerQueue* q = existing();
  g_held_for_fork = q;
  if (!q) return;
  const Clock::time_point deadline = Clock::now() + kForkGrace;
  q->mu_.lock();
  q->forking_ = true;
  // A timer being called finishes first (a timeout's decision and its post: microseconds), so
  // that the child does not lose it; unless this is that timer, forking.
  while (q->calling_ && !tls_on_timer_thread && Clock::now() < deadline) {
    q->mu_.unlock();
    q->fork_waiter_->park(deadline);
    q->mu_.lock();
  }
}

void TimerQueue::after_fork_in_parent() noexcept {
  if (TimerQueue* q = std::exchange(g_held_for_fork, nullptr)) q->after_fork(false);
}

void TimerQueue::after_fork_in_child() noexcept {
  if (TimerQueue* q = std::exchange(g_held_for_fork, nullptr)) q->after_fork(true);
}

void TimerQueue::after_fork(bool child) noexcept {
  forking_ = false;
  if (child) {
    // Only the forking thread exists here: a timer the parent's thread was still calling
    // (past kForkGrace) is not called here.
    thread_.abandon();
    calling_ = false;
    if (!timers_.empty() && !stopping_) {
      try {
        start_thread_locked();
      } catch (...) {
        // No thread: the next schedule() starts one.
      }
    }
  }
  mu_.unlock();
  if (!child) parker_->unpark();  // it took nothing out while the fork was under way
}

}  // namespace eventide::detail
