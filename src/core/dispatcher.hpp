// Dispatcher: the thread that runs user callbacks for one device (or for host-only events).
//
// Callbacks are queued by whoever finishes an event (a stream worker, a GPU watcher, the
// thread that set a UserEvent) and run here in the order queued, with no runtime lock held,
// so a callback may call any eventide API, and a slow callback delays other callbacks of its
// device but no device work. A callback that throws is reported through the callback error
// handler and the next one runs. The thread starts with the first callback.
//
// Thread-safety: post() from any thread. Shutdown: stop() lets the running callback finish
// (waiting kExitGrace at most), drops those still queued (at process exit they would run
// against a half-destroyed program), and joins the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/runtime_thread.hpp"
#include "eventide/detail/callback.hpp"

namespace eventide::detail {

class EventState;

class Dispatcher {
 public:
  explicit Dispatcher(std::string name) : name_(std::move(name)) {}
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Queues `fn`; `source` names it if it throws. If the thread cannot start (the process is
  // at its thread limit), it stays queued for the next post() to try again.
  void post(Callback fn, std::shared_ptr<const EventState> source);
  // Starts the thread if it has not started: DeviceError if the OS refuses. Adding a callback
  // calls it first, so that a callback is never accepted that no thread could run.
  void ensure_thread();
  // A callback was just added to pending work: the thread keeps spinning (yielding) for a
  // while instead of going to sleep, so that a callback due soon runs without the wake-up of
  // a sleeping thread (5 to 15 µs).
  void expect_soon() noexcept;
  // stop(): request_stop() then join_until(kExitGrace from now).
  void stop() noexcept;
  // Process exit in two steps, so that all of the runtime's threads share one grace period:
  // no callback starts after request_stop() (those queued are dropped); join_until() waits
  // for the one running until `deadline`, then leaves it (detached).
  void request_stop() noexcept;
  void join_until(Clock::time_point deadline) noexcept;

  // fork(): the queue's lock is held across it; in the child, whose copy of the thread is
  // gone, a new thread starts with the next callback (those queued run there too).
  void before_fork() noexcept;
  void after_fork(bool child) noexcept;

  // Whether the calling thread is a dispatcher thread (of any device).
  static bool on_dispatcher_thread() noexcept;

 private:
  struct Item {
    Callback fn;
    std::shared_ptr<const EventState> source;
  };
  void run();

  std::string name_;
  RuntimeMutex mu_;
  std::vector<Item> queue_;
  bool stopping_ = false;
  RuntimeThread thread_;
  RuntimeThread stopped_thread_;  // request_stop() moved thread_ here for join_until()
  std::atomic<bool> started_{false};  // thread_ has started: ensure_thread()'s look without mu_
  Ref<Parker> parker_ = make_ref<Parker>();
  std::atomic<std::int64_t> expect_until_ns_{0};
};

// Reports an exception a callback threw, through the handler set by
// set_callback_error_handler (stderr by default).
void report_callback_error(std::exception_ptr error, const std::string& where) noexcept;

}  // namespace eventide::detail
