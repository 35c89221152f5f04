// The tests' own coroutine type, for eventide/coro.hpp: nothing of eventide's in its promise.
//
// A Task starts at once (it runs up to its first suspension inside the call that makes it) and
// says when it has ended (done(), wait_done(timeout): its final suspension, and whatever it
// threw). Its owner destroys the frame when the Task goes: after its end, or while it is still
// suspended, which is how the tests destroy a coroutine that waits. StopTask's promise also
// has get_stop_token(), the token eventide uses when the co_await names none.
//
// Thread-safety: the end is reported under a mutex, so any thread may wait for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <utility>

namespace eventide_test {

struct TaskEnd {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

template <bool WithStopToken>
class BasicTask {
 public:
  struct promise_type;
  using Handle = std::coroutine_handle<promise_type>;

  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    void await_suspend(Handle h) noexcept {
      // Suspended at the end: the owner may destroy the frame from here on.
      std::shared_ptr<TaskEnd> end = h.promise().end;
      std::lock_guard lock(end->mu);
      end->done = true;
      end->cv.notify_all();
    }
    void await_resume() noexcept {}
  };

  struct PromiseBase {
    std::shared_ptr<TaskEnd> end = std::make_shared<TaskEnd>();
    std::suspend_never initial_suspend() noexcept { return {}; }
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { end->error = std::current_exception(); }
  };
  struct PromiseWithToken : PromiseBase {
    std::stop_source stop;
    std::stop_token get_stop_token() const noexcept { return stop.get_token(); }
  };
  struct promise_type : std::conditional_t<WithStopToken, PromiseWithToken, PromiseBase> {
    BasicTask get_return_object() { return BasicTask(Handle::from_promise(*this)); }
  };

  BasicTask() = default;
  BasicTask(BasicTask&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), end_(std::move(other.end_)) {}
  BasicTask& operator=(BasicTask&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
      end_ = std::move(other.end_);
    }
    return *this;
  }
  ~BasicTask() { destroy(); }

  bool done() const {
    std::lock_guard lock(end_->mu);
    return end_->done;
  }
  bool wait_done(std::chrono::nanoseconds timeout) const {
    std::unique_lock lock(end_->mu);
    return end_->cv.wait_for(lock, timeout, [&] { return end_->done; });
  }
  // What the coroutine threw (once done).
  std::exception_ptr error() const {
    std::lock_guard lock(end_->mu);
    return end_->error;
  }
  void request_stop()
    requires WithStopToken
  {
    handle_.promise().stop.request_stop();
  }
  // Destroys the frame now, wherever it is suspended.
  void destroy() noexcept {
    if (handle_) std::exchange(handle_, nullptr).destroy();
  }

 private:
  explicit BasicTask(Handle h) : handle_(h), end_(h.promise().end) {}
  Handle handle_;
  std::shared_ptr<TaskEnd> end_;
};

using Task = BasicTask<false>;
using StopTask = BasicTask<true>;

}  // namespace eventide_test
