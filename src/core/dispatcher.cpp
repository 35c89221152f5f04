#include "core/dispatcher.hpp"

#include <cxxabi.h>

#include <cstdio>
#include <system_error>
#include <utility>

#include "core/event_state.hpp"
#include "core/nvtx.hpp"
#include "core/observer.hpp"
#include "core/work.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"

namespace eventide {

namespace {
std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}
// Held through a shared_ptr, so that a report takes its own reference without copying the
// std::function (a copy may allocate).
std::shared_ptr<const CallbackErrorHandler>& handler_slot() {
  static std::shared_ptr<const CallbackErrorHandler> handler;
  return handler;
}
thread_local bool tls_on_dispatcher = false;
}  // namespace

void set_callback_error_handler(CallbackErrorHandler handler) {
  std::shared_ptr<const CallbackErrorHandler> fresh;
  if (handler) fresh = std::make_shared<const CallbackErrorHandler>(std::move(handler));
  std::lock_guard lock(handler_mutex());
  handler_slot().swap(fresh);
}  // the handler replaced is destroyed here, unlocked

namespace detail {

void report_callback_error(std::exception_ptr error, std::string_view where) noexcept {
  std::shared_ptr<const CallbackErrorHandler> handler;
  {
    std::lock_guard lock(handler_mutex());
    handler = handler_slot();
  }
  if (handler) {
    try {
      (*handler)(error, where);
      return;
    } catch (...) {
      std::fprintf(stderr, "eventide: the callback error handler threw: %s\n",
                   error_what(std::current_exception()));
    }
  }
  std::fprintf(stderr, "eventide: %.*s threw: %s\n", static_cast<int>(where.size()), where.data(),
               error_what(error));
}

void report_callback_error(std::exception_ptr error, const EventState* source) noexcept {
  std::string where;
  try {
    if (source) where = "callback of " + source->str();
  } catch (...) {
    where.clear();  // out of memory: unnamed
  }
  report_callback_error(std::move(error), where.empty() ? std::string_view("a callback") : where);
}

// --- CallbackList ------------------------------------------------------------------------

void CallbackList::push_back(Callback&& fn) {
  push_back(std::make_unique<CallbackTask>(std::move(fn)));
}

void CallbackList::push_back(std::unique_ptr<CallbackTask> task) noexcept {
  CallbackTask* t = task.release();
  t->next = nullptr;
  if (tail_) {
    tail_->next = t;
  } else {
    head_ = t;
  }
  tail_ = t;
  ++size_;
}

void CallbackList::splice(CallbackList& other) noexcept {
  if (!other.head_) return;
  if (tail_) {
    tail_->next = other.head_;
  } else {
    head_ = other.head_;
  }
  tail_ = other.tail_;
  size_ += other.size_;
  other.head_ = other.tail_ = nullptr;
  other.size_ = 0;
}

std::unique_ptr<CallbackTask> CallbackList::pop_front() noexcept {
  CallbackTask* t = head_;
  if (!t) return nullptr;
  head_ = t->next;
  if (!head_) tail_ = nullptr;
  t->next = nullptr;
  --size_;
  return std::unique_ptr<CallbackTask>(t);
}

std::unique_ptr<CallbackTask> CallbackList::take(std::uint64_t id) noexcept {
  CallbackTask* prev = nullptr;
  for (CallbackTask* t = head_; t; prev = t, t = t->next) {
    if (t->id != id) continue;
    (prev ? prev->next : head_) = t->next;
    if (tail_ == t) tail_ = prev;
    t->next = nullptr;
    --size_;
    return std::unique_ptr<CallbackTask>(t);
  }
  return nullptr;
}

void CallbackList::clear() noexcept {
  while (pop_front()) {
  }
}

// --- Dispatcher --------------------------------------------------------------------------

bool Dispatcher::on_dispatcher_thread() noexcept { return tls_on_dispatcher; }

Dispatcher::Dispatcher(std::string name)
    : name_(std::move(name)), observed_name_("callbacks " + name_) {}

Dispatcher::~Dispatcher() { stop(); }

void Dispatcher::post(CallbackList tasks, const std::shared_ptr<const EventState>& source) noexcept {
  if (tasks.empty()) return;
  for (CallbackTask* t = tasks.front(); t; t = t->next) t->source = source;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;  // process exit: see the header (dropped on return, unlocked)
    queue_.splice(tasks);
    if (!thread_.joinable()) {
      try {
        start_thread_locked();
      } catch (...) {
        // Queued all the same: see the header.
      }
    }
  }
  parker_->unpark();
}

void Dispatcher::start_thread_locked() {
  thread_ = RuntimeThread([this] { run(); });
  started_.store(true, std::memory_order_release);
}

void Dispatcher::ensure_thread() {
  if (started_.load(std::memory_order_acquire)) [[likely]] return;
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  try {
    start_thread_locked();
  } catch (const std::system_error& e) {
    throw DeviceError("cannot start the thread that runs the callbacks of " + name_ + " (" +
                          e.what() + "): the process is at its thread limit",
                      "pthread_create", e.code().value());
  }
}

namespace {
// How long the callback thread stays awake after a callback was added to pending work.
constexpr std::int64_t kExpectWindowNs = 2'000'000;
}  // namespace

void Dispatcher::expect_soon() noexcept {
  expect_until_ns_.store(host_now_ns() + kExpectWindowNs, std::memory_order_relaxed);
}

void Dispatcher::stop() noexcept {
  request_stop();
  join_until(Clock::now() + kExitGrace);
}

void Dispatcher::request_stop() noexcept {
  CallbackList dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.splice(queue_);
    if (thread_.joinable()) stopped_thread_ = std::move(thread_);
  }
  parker_->unpark();
  // Destroyed here, unlocked: they may own anything.
}

void Dispatcher::join_until(Clock::time_point deadline) noexcept {
  RuntimeThread thread;
  {
    std::lock_guard lock(mu_);
    thread = std::move(stopped_thread_);
  }
  thread.join_until(deadline);
}

void Dispatcher::before_fork() noexcept { mu_.lock(); }

void Dispatcher::after_fork(ForkSide side) noexcept {
  if (side == ForkSide::child) {
    thread_.abandon();
    stopped_thread_.abandon();
    started_.store(false, std::memory_order_release);
    if (!queue_.empty()) {
      try {
        start_thread_locked();
      } catch (...) {
        // No thread: the next post() tries again.
      }
    }
  }
  mu_.unlock();
}

void Dispatcher::run() {
  tls_on_dispatcher = true;
  for (;;) {
    CallbackList batch;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      batch.splice(queue_);
    }
    if (batch.empty()) {
      // A callback expected soon: stay awake (yielding) until it comes or the window closes.
      const std::int64_t until = expect_until_ns_.load(std::memory_order_relaxed);
      if (const std::int64_t left = until - host_now_ns(); left > 0) {
        parker_->park(Clock::now() + std::chrono::nanoseconds(left), Parker::Sleep::never);
        continue;
      }
      parker_->park();
      continue;
    }
    // Nothing here allocates (a thread's body: what escaped it would end the process).
    while (std::unique_ptr<CallbackTask> task = batch.pop_front()) {
      Observer* const observing = observer();
      const std::int64_t start = observing ? host_now_ns() : 0;
      try {
        nvtx::Scope range("callback");  // no runtime lock is held here
        task->fn();
      } catch (abi::__forced_unwind&) {
        // The thread is being ended (pthread_exit: CPython does it at interpreter exit to a
        // thread that wants the GIL back): let it end.
        throw;
      } catch (...) {
        report_callback_error(std::current_exception(), task->source.get());
      }
      if (observing) [[unlikely]] {
        observing->on_callback(task->source.get(), observed_name_, start, host_now_ns());
      }
      // The callable is destroyed here, not under the queue lock: it may own anything.
    }
  }
}

}  // namespace detail
}  // namespace eventide
