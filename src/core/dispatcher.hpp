// Dispatcher: the thread that runs user callbacks for one device (or for host-only events).
//
// Callbacks are queued by whoever finishes an event (a stream worker, a GPU watcher, the
// thread that set a UserEvent) and run here in the order queued, with no runtime lock held,
// so a callback may call any eventide API, and a slow callback delays other callbacks of its
// device but no device work. A callback that throws is reported through the callback error
// handler and the next one runs. The thread starts with the first callback.
//
// Out of memory: handing callbacks over allocates nothing. Each callback travels in a
// CallbackTask allocated when it is added (add_callback, where a failure is that call's
// exception), and the thread is started there too (ensure_thread), so that the thread that
// finishes the event, where nothing may fail, only links tasks into the queue.
//
// Thread-safety: post() from any thread. Shutdown: stop() lets the running callback finish
// (waiting kExitGrace at most), drops those still queued (at process exit they would run
// against a half-destroyed program), and joins the thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/fork.hpp"
#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/runtime_thread.hpp"
#include "eventide/detail/callback.hpp"

namespace eventide::detail {

class EventState;

// A callback on its way to a dispatcher (see the header comment).
struct CallbackTask {
  explicit CallbackTask(Callback f) noexcept : fn(std::move(f)) {}
  Callback fn;
  std::shared_ptr<const EventState> source;  // names it if it throws; set by post()
  std::uint64_t id = 0;                      // its owner's name for it (remove_callback)
  CallbackTask* next = nullptr;
};

// An owning first-in first-out list of tasks. Moving, splicing and popping allocate nothing;
// destroying it destroys the callables still in it (so do that with no runtime lock held:
// they may own anything). Not thread-safe.
class CallbackList {
 public:
  CallbackList() noexcept = default;
  CallbackList(CallbackList&& other) noexcept { splice(other); }
  CallbackList& operator=(CallbackList&& other) noexcept {
    if (this != &other) {
      clear();
      splice(other);
    }
    return *this;
  }
  CallbackList(const CallbackList&) = delete;
  CallbackList& operator=(const CallbackList&) = delete;
  ~CallbackList() { clear(); }

  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  // Allocates a task for `fn`: std::bad_alloc leaves the list as it was (and `fn` unmoved).
  void push_back(Callback&& fn);
  void push_back(std::unique_ptr<CallbackTask> task) noexcept;
  // Moves every task of `other` to the end of this list.
  void splice(CallbackList& other) noexcept;
  std::unique_ptr<CallbackTask> pop_front() noexcept;
  // Takes out the task with this id (null if none).
  std::unique_ptr<CallbackTask> take(std::uint64_t id) noexcept;
  void clear() noexcept;
  // The first task (then t->next), for walking the list.
  CallbackTask* front() const noexcept { return head_; }

 private:
  CallbackTask* head_ = nullptr;
  CallbackTask* tail_ = nullptr;
  std::size_t size_ = 0;
};

class Dispatcher {
 public:
  explicit Dispatcher(std::string name);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Queues `tasks`; `source` names them if they throw. Allocates nothing and never throws.
  // If the thread cannot start (ensure_thread() was not called first, and the process is at
  // its thread limit), they stay queued for the next post() or ensure_thread() to try again.
  void post(CallbackList tasks, const std::shared_ptr<const EventState>& source) noexcept;
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
  void after_fork(ForkSide side) noexcept;

  // Whether the calling thread is a dispatcher thread (of any device).
  static bool on_dispatcher_thread() noexcept;

 private:
  void run();
  // Under mu_: starts the thread (std::system_error if the OS refuses).
  void start_thread_locked();

  std::string name_;
  std::string observed_name_;  // "callbacks <name>": the thread's name for observers, made once
  RuntimeMutex mu_;
  CallbackList queue_;
  bool stopping_ = false;
  RuntimeThread thread_;
  RuntimeThread stopped_thread_;  // request_stop() moved thread_ here for join_until()
  std::atomic<bool> started_{false};  // thread_ has started: ensure_thread()'s look without mu_
  Ref<Parker> parker_ = make_ref<Parker>();
  std::atomic<std::int64_t> expect_until_ns_{0};
};

// Reports an exception a callback threw, through the handler set by
// set_callback_error_handler (stderr by default). Allocates nothing it cannot do without.
void report_callback_error(std::exception_ptr error, std::string_view where) noexcept;
// The same, named after `source` ("callback of <Event finished on cpu, 1 op>"; "a callback"
// if it is null, or without the memory to name it).
void report_callback_error(std::exception_ptr error, const EventState* source) noexcept;

}  // namespace eventide::detail
