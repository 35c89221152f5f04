// tools/measure/one_thread_pool.hpp: a one-thread executor, as a server's pool would be, for
// the coroutine benchmark (bench/coro_bench.cpp) and tests (tests/cpp/coro_util.hpp) that
// resume coroutines through eventide::resume_on: it runs what is posted to it, in order, on a
// thread of its own. Header-only.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace eventide::bench {

class OneThreadPool {
 public:
  OneThreadPool() : thread_([this] { run(); }) {}
  // Runs what was posted before, then joins the thread.
  ~OneThreadPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  OneThreadPool(const OneThreadPool&) = delete;
  OneThreadPool& operator=(const OneThreadPool&) = delete;

  void post(std::function<void()> fn) {
    // Notified under the lock: what is posted may end the run, whose thread then destroys the
    // pool, while a notify after the unlock would still be using its condition variable.
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(fn));
    cv_.notify_all();
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;  // what it holds goes on the pool's thread, before the next one runs
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

// The pool as an executor for resume_on: a copyable handle with post(f).
struct PoolRef {
  OneThreadPool* pool;
  void post(std::function<void()> fn) const { pool->post(std::move(fn)); }
};

}  // namespace eventide::bench
