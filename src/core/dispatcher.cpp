#include "core/dispatcher.hpp"

#include <cxxabi.h>

#include <cstdio>
#include <system_error>
#include <utility>

#include "core/event_state.hpp"
#include "core/profiler_state.hpp"
#include "core/work.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"

namespace eventide {

namespace {
std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}
CallbackErrorHandler& handler_slot() {
  static CallbackErrorHandler handler;
  return handler;
}
thread_local bool tls_on_dispatcher = false;
}  // namespace

void set_callback_error_handler(CallbackErrorHandler handler) {
  std::lock_guard lock(handler_mutex());
  handler_slot() = std::move(handler);
}

namespace detail {

void report_callback_error(std::exception_ptr error, const std::string& where) noexcept {
  CallbackErrorHandler handler;
  {
    std::lock_guard lock(handler_mutex());
    handler = handler_slot();
  }
  if (handler) {
    try {
      handler(error, where);
      return;
    } catch (...) {
      std::fprintf(stderr, "eventide: the callback error handler threw: %s\n",
                   describe_error(std::current_exception()).c_str());
    }
  }
  std::fprintf(stderr, "eventide: %s threw: %s\n", where.c_str(), describe_error(error).c_str());
}

bool Dispatcher::on_dispatcher_thread() noexcept { return tls_on_dispatcher; }

Dispatcher::~Dispatcher() { stop(); }

void Dispatcher::post(Callback fn, std::shared_ptr<const EventState> source) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;  // process exit: see the header
    queue_.push_back(Item{std::move(fn), std::move(source)});
    if (!thread_.joinable()) {
      try {
        thread_ = RuntimeThread([this] { run(); });
        started_.store(true, std::memory_order_release);
      } catch (const std::system_error&) {
        // Queued all the same: see the header.
      }
    }
  }
  parker_->unpark();
}

void Dispatcher::ensure_thread() {
  if (started_.load(std::memory_order_acquire)) [[likely]] return;
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  try {
    thread_ = RuntimeThread([this] { run(); });
    started_.store(true, std::memory_order_release);
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
  std::vector<Item> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
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

void Dispatcher::after_fork(bool child) noexcept {
  if (child) {
    thread_.abandon();
    stopped_thread_.abandon();
    started_.store(false, std::memory_order_release);
    if (!queue_.empty()) {
      try {
        thread_ = RuntimeThread([this] { run(); });
        started_.store(true, std::memory_order_release);
      } catch (...) {
        // No thread: the next post() tries again.
      }
    }
  }
  mu_.unlock();
}

void Dispatcher::run() {
  tls_on_dispatcher = true;
  std::vector<Item> batch;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      batch.swap(queue_);
    }
    if (batch.empty()) {
      // A callback expected soon: stay awake (yielding) until it comes or the window closes.
      const std::int64_t until = expect_until_ns_.load(std::memory_order_relaxed);
      if (const std::int64_t left = until - host_now_ns(); left > 0) {
        parker_->park(Clock::now() + std::chrono::nanoseconds(left), /*spin_to_deadline=*/true);
        continue;
      }
      parker_->park();
      continue;
    }
    for (Item& item : batch) {
      const bool profiled = profiling();
      const std::int64_t start = profiled ? host_now_ns() : 0;
      try {
        item.fn();
      } catch (abi::__forced_unwind&) {
        // The thread is being ended (pthread_exit: CPython does it at interpreter exit to a
        // thread that wants the GIL back): let it end.
        throw;
      } catch (...) {
        std::string where = "a callback";
        if (item.source) where = "callback of " + item.source->str();
        report_callback_error(std::current_exception(), where);
      }
      if (profiled) [[unlikely]] {
        ProfilerState::on_callback(item.source ? item.source->profile_id() : 0, "callbacks " + name_,
                                   start, host_now_ns());
      }
      // Destroy the callable here, not under the queue lock: it may own anything.
      item.fn = Callback();
      item.source.reset();
    }
    batch.clear();
  }
}

}  // namespace detail
}  // namespace eventide
