#include "core/timer.hpp"

#include <atomic>
#include <exception>
#include <string>
#include <system_error>
#include <vector>

#include "core/dispatcher.hpp"
#include "eventide/errors.hpp"

namespace eventide::detail {

namespace {
std::atomic<TimerQueue*> g_queue{nullptr};
TimerQueue* g_held_for_fork = nullptr;  // the forking thread's: before_fork to after_fork
}  // namespace

TimerQueue& TimerQueue::get() {
  // Leaked on purpose, like the runtime: a handle that outlives the exit may still cancel.
  static TimerQueue* queue = [] {
    auto* q = new TimerQueue();
    g_queue.store(q, std::memory_order_release);
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
  for (;;) {
    std::vector<Callback> due;
    Deadline sleep_until;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      const Clock::time_point now = Clock::now();
      while (!timers_.empty() && timers_.begin()->first.at <= now) {
        auto node = timers_.extract(timers_.begin());
        try {
          due.push_back(std::move(node.mapped()));
        } catch (...) {
          // Out of memory for the list: put it back and run what was taken; it is due still.
          timers_.insert(std::move(node));
          break;
        }
      }
      if (due.empty() && !timers_.empty()) sleep_until = timers_.begin()->first.at;
    }
    if (due.empty()) {
      parker_->park(sleep_until);
      continue;
    }
    for (Callback& fn : due) {
      try {
        fn();
      } catch (...) {
        report_callback_error(std::current_exception(), std::string_view("a timer"));
      }
      fn = Callback();  // destroyed here, unlocked: it may own anything
    }
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
  g_held_for_fork = existing();
  if (g_held_for_fork) g_held_for_fork->mu_.lock();
}

void TimerQueue::after_fork(ForkSide side) noexcept {
  TimerQueue* q = std::exchange(g_held_for_fork, nullptr);
  if (!q) return;
  if (side == ForkSide::child) {
    q->thread_.abandon();
    if (!q->timers_.empty() && !q->stopping_) {
      try {
        q->start_thread_locked();
      } catch (...) {
        // No thread: the next schedule() starts one.
      }
    }
  }
  q->mu_.unlock();
}

}  // namespace eventide::detail
