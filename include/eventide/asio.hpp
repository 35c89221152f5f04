// eventide/asio.hpp: eventide's waits as asio asynchronous operations, for asio::awaitable
// coroutines (whose promise awaits only asio's own awaitables) and every other completion
// token (callbacks, asio::use_future, asio::deferred, the awaitable operators). Header-only;
// needs standalone asio (`#include <asio.hpp>`, Debian's libasio-dev), which eventide itself
// does not: include this header only where asio is.
//
// @code
//   asio::awaitable<void> handle(ev::Tensor x) {
//     ev::Tensor y = ev::matmul(x, x);
//     co_await ev::async_wait(y, asio::use_awaitable);   // resumes on the coroutine's executor
//     std::size_t i = co_await ev::async_wait(ev::when_any(a, b), asio::use_awaitable);
//     bool in_time = co_await ev::async_wait(y | ev::timeout(5ms), asio::use_awaitable);
//   }
// @endcode
//
// async_wait(what, token) waits as `co_await what` does (eventide/coro.hpp: the same wait,
// results, errors and cancellation) and completes the asio way: the handler runs on its
// associated executor (a coroutine's: its io_context's thread), never inside async_wait, and
// the executor counts the operation as outstanding work until then (io.run() does not return
// while it waits). Completion signatures: void(std::exception_ptr) for an event, a tensor or
// when_all; void(std::exception_ptr, bool) with a timeout (false: the time ran out);
// void(std::exception_ptr, std::size_t) for when_any, and std::optional<std::size_t> with a
// timeout. The exception is the work's error, or eventide::Cancelled; with
// asio::use_awaitable it is thrown from the co_await.
//
// Cancellation: asio's per-operation cancellation (the handler's cancellation slot: the
// awaitable operators `||`, asio::bind_cancellation_slot, co_spawn's) of any type, and a
// `| cancel_on(token)` on what is awaited, withdraw the wait as a std::stop_token does for a
// co_await, and the handler gets Cancelled. Where it resumes is the handler's executor: a
// `| resume_on(...)` is refused at compile time.
//
// Thread-safety, memory ordering and lifetime: as for co_await (eventide/coro.hpp); the
// handler is kept (with a work guard on its executor) until the wait is decided.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <stop_token>
#include <utility>
#include <vector>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

#include "eventide/coro.hpp"

namespace eventide {

namespace detail {

template <WaitRule Rule, bool Timed>
struct AsioSignature;
template <>
struct AsioSignature<WaitRule::all, false> {
  using type = void(std::exception_ptr);
};
template <>
struct AsioSignature<WaitRule::all, true> {
  using type = void(std::exception_ptr, bool);
};
template <>
struct AsioSignature<WaitRule::any, false> {
  using type = void(std::exception_ptr, std::size_t);
};
template <>
struct AsioSignature<WaitRule::any, true> {
  using type = void(std::exception_ptr, std::optional<std::size_t>);
};

// Calls `handler` with what `outcome` says.
template <WaitRule Rule, bool Timed, class Handler>
void complete_asio(Handler& handler, const WaitOutcome& outcome, std::exception_ptr cancelled) {
  // (A failed event is a finished one for when_any: `failed` is then async_wait's own error.)
  std::exception_ptr error;
  if (outcome.end == WaitEnd::cancelled) error = std::move(cancelled);
  if (outcome.end == WaitEnd::failed) error = outcome.error;
  const bool finished = outcome.end == WaitEnd::finished;
  if constexpr (Rule == WaitRule::any && Timed) {
    std::move(handler)(error, finished ? std::optional<std::size_t>(outcome.index) : std::nullopt);
  } else if constexpr (Rule == WaitRule::any) {
    std::move(handler)(error, outcome.index);
  } else if constexpr (Timed) {
    std::move(handler)(error, finished);
  } else {
    std::move(handler)(error);
  }
}

// The asio side of one wait: the handler, its executor kept busy, its cancellation slot and
// the stop callback of a cancel_on token. Owned by the wait's delivery until it is decided.
template <WaitRule Rule, bool Timed, class Handler>
class AsioOperation {
 public:
  using Executor = asio::associated_executor_t<Handler>;
  using Slot = asio::associated_cancellation_slot_t<Handler>;

  AsioOperation(Handler handler, std::vector<Event> events)
      : executor_(asio::get_associated_executor(handler)),
        work_(asio::make_work_guard(executor_)),
        slot_(asio::get_associated_cancellation_slot(handler)),
        handler_(std::move(handler)),
        events_(std::move(events)) {}

  // On the callback thread (or inside async_wait when decided at once): lets go of the
  // cancellation sources, then hands the completion to the handler's executor.
  void complete(const WaitOutcome& outcome) {
    stop_callback_.reset();  // waits for a stop callback running on another thread, if any
    std::exception_ptr cancelled;
    if (outcome.end == WaitEnd::cancelled) cancelled = cancelled_error(events_, Rule, "async_wait");
    // The error made here is moved, not copied, into the completion: no reference to it stays
    // on this thread, whose release could come after the handler has read it on its executor
    // (an exception's count lives in the C++ runtime, out of a race detector's sight).
    // The executor is kept busy until post() has returned, not only until the handler has
    // run: a handler that ends the io_context's last work on its thread would otherwise let
    // the context be destroyed while post() still signals it on this one.
    const asio::executor_work_guard<Executor> busy = std::move(work_);
    asio::post(executor_, [handler = std::move(handler_), slot = slot_, outcome,
                           cancelled = std::move(cancelled)]() mutable {
      if (slot.is_connected()) slot.clear();  // on the executor, where the slot is emitted
      complete_asio<Rule, Timed>(handler, outcome, cancelled);
    });
  }

  struct SlotHandler {
    WaitHandle wait;
    void operator()(asio::cancellation_type type) {
      if (type != asio::cancellation_type::none) wait.cancel();
    }
  };
  struct StopFn {
    WaitHandle wait;
    void operator()() noexcept { wait.cancel(); }
  };

  Executor executor_;
  asio::executor_work_guard<Executor> work_;
  Slot slot_;
  Handler handler_;
  std::vector<Event> events_;
  std::unique_ptr<std::stop_callback<StopFn>> stop_callback_;
};

struct AsioInitiate {
  template <class Handler, WaitRule Rule, bool Timed>
  void operator()(Handler&& handler, Awaitable<Rule, Timed, CallbackThread> what) const {
    using Op = AsioOperation<Rule, Timed, std::decay_t<Handler>>;
    auto op = std::make_unique<Op>(std::forward<Handler>(handler),
                                   std::vector<Event>(what.events().begin(), what.events().end()));
    const std::vector<Event>& events = op->events_;
    std::optional<WaitOutcome> ready;
    try {
      check_not_empty(events, "async_wait");
    } catch (...) {
      ready = WaitOutcome{WaitEnd::failed, 0, std::current_exception()};
    }
    const std::stop_token stop = what.stop_token().value_or(std::stop_token());
    if (!ready && stop.stop_requested()) ready = WaitOutcome{WaitEnd::cancelled, 0, nullptr};
    if (!ready) ready = ready_outcome(events, Rule);
    if (!ready && what.deadline() && std::chrono::steady_clock::now() >= *what.deadline()) {
      ready = WaitOutcome{WaitEnd::timed_out, 0, nullptr};
    }
    if (ready) {
      op->complete(*ready);  // posted: never inside async_wait
      return;
    }
    WaitHandle wait = WaitHandle::make(events, Rule, what.deadline(),
                                       op->slot_.is_connected() || stop.stop_possible());
    Op* raw = op.get();
    // Throws before anything is registered: the handler goes unused, as in asio's own
    // initiations that run out of memory.
    wait.set_delivery([op = std::move(op), w = wait.get()] { op->complete(WaitHandle::share(w).outcome()); });
    bool armed;
    try {
      if (raw->slot_.is_connected()) raw->slot_.template emplace<typename Op::SlotHandler>(wait);
      if (stop.stop_possible()) {
        raw->stop_callback_ = std::make_unique<std::stop_callback<typename Op::StopFn>>(
            stop, typename Op::StopFn{wait});
      }
      armed = wait.arm();
    } catch (...) {
      // Out of memory, or no thread for the timer: nothing will deliver (the wait was never
      // armed) and what was registered is taken back; the handler gets the error, the asio
      // way, rather than a wait that holds it for ever.
      raw->complete(WaitOutcome{WaitEnd::failed, 0, std::current_exception()});
      return;
    }
    if (!armed) wait.deliver();  // decided while arming: completes through a post
  }
};

}  // namespace detail

// Waits for `what` (an event, a UserEvent, a tensor, when_all, when_any, with options) as an
// asio asynchronous operation; see the header comment.
template <class What, class CompletionToken>
auto async_wait(const What& what, CompletionToken&& token) {
  if constexpr (detail::AwaitSource<What>) {
    return async_wait(Awaitable<detail::WaitRule::all>(detail::as_event(what), std::nullopt, std::nullopt, {}),
                      std::forward<CompletionToken>(token));
  } else {
    return [&]<detail::WaitRule Rule, bool Timed, class Ex>(const Awaitable<Rule, Timed, Ex>& a) {
      static_assert(std::is_same_v<Ex, detail::CallbackThread>,
                    "eventide::async_wait completes on its handler's executor: drop resume_on");
      return asio::async_initiate<CompletionToken, typename detail::AsioSignature<Rule, Timed>::type>(
          detail::AsioInitiate{}, token, a);
    }(what);
  }
}

}  // namespace eventide
