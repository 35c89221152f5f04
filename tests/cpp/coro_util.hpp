// Helpers shared by the coroutine tests (coro_test, coro_race_test, timer_test): what a
// coroutine saw when it resumed (Probe), the coroutines under test, written as free functions
// of the tests' own Task type (coro_task.hpp), and executors of the tests' own (a one-thread
// pool, a queue that holds what it is handed until the test runs it).
//
// Thread-safety: a Probe is written by its coroutine before its end and read by the test after
// Task::wait_done (the Task's mutex orders them); the executors are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <eventide/coro.hpp>

#include "core/runtime_lock.hpp"
#include "coro_task.hpp"
#include "measure/one_thread_pool.hpp"
#include "test_util.hpp"

namespace eventide_test {

using Clock = std::chrono::steady_clock;

// What a coroutine saw when it resumed. Written by the coroutine before its end, read by the
// test after wait_done (the Task's mutex orders them).
struct Probe {
  std::atomic<int> resumes{0};
  std::thread::id thread;
  int locks_held = -1;
  std::exception_ptr error;
  std::optional<std::size_t> index;
  std::optional<bool> in_time;
  void resumed() {
    thread = std::this_thread::get_id();
    locks_held = eventide::detail::runtime_locks_held();
    resumes.fetch_add(1);
  }
};
using ProbePtr = std::shared_ptr<Probe>;
inline ProbePtr probe() { return std::make_shared<Probe>(); }

// Callbacks still waiting on `u`: a wait withdrawn must leave none.
inline int pending_callbacks(ev::UserEvent& u) {
  int n = 0;
  u.visit_pending_callbacks([&](ev::detail::Callback&) {
    ++n;
    return 0;
  });
  return n;
}

// The coroutines under test: free functions, so that what they use lives in their frames.
template <class A>
Task await_void(A awaitable, ProbePtr p) {
  try {
    co_await std::move(awaitable);
    p->resumed();
  } catch (...) {
    p->resumed();
    p->error = std::current_exception();
  }
}
template <class A>
Task await_index(A awaitable, ProbePtr p) {
  try {
    p->index = co_await std::move(awaitable);
    p->resumed();
  } catch (...) {
    p->resumed();
    p->error = std::current_exception();
  }
}
template <class A>
Task await_timed(A awaitable, ProbePtr p) {
  try {
    p->in_time = co_await std::move(awaitable);
    p->resumed();
  } catch (...) {
    p->resumed();
    p->error = std::current_exception();
  }
}
// An executor of the tests' own: one thread running what is posted to it, in order
// (measure/one_thread_pool.hpp, shared with the coroutine benchmark), and its handle.
using eventide::bench::OneThreadPool;
using eventide::bench::PoolRef;

// Runs `fn` on the pool's thread and waits for it.
inline void run_here(OneThreadPool& pool, std::function<void()> fn) {
  Flag done;
  pool.post([&] {
    fn();
    done.set();
  });
  ASSERT_TRUE(done.wait_for(30s));
}

// An executor given as a callable, that keeps what it is handed until the test runs it.
struct HeldQueue {
  std::mutex mu;
  std::vector<std::function<void()>> held;
  void run_all() {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard lock(mu);
      now.swap(held);
    }
    for (auto& fn : now) fn();
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return held.size();
  }
};
struct HeldExecutor {
  std::shared_ptr<HeldQueue> queue;
  void operator()(std::function<void()> fn) const {
    std::lock_guard lock(queue->mu);
    queue->held.push_back(std::move(fn));
  }
};

}  // namespace eventide_test
