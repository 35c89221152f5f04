// eventide/coro.hpp: C++20 coroutines that co_await eventide's events, tensors and UserEvents,
// resumed where the caller says, cancellable by a std::stop_token. Any coroutine type can
// await them (nothing is asked of its promise); asio's asio::awaitable, which awaits only its
// own kind, uses the same waits as asio operations: eventide/asio.hpp.
//
// @code
//   namespace ev = eventide;
//   Task serve(ev::Tensor x) {                        // Task: any coroutine type
//     ev::Tensor y = ev::matmul(x, x);
//     co_await y;                                      // resumes once the matmul has finished
//     std::size_t first = co_await ev::when_any(a, b); // the index of the first to finish
//     co_await ev::when_all(a, b, y);                  // every one (rethrows a failure)
//     bool done = co_await (e | ev::timeout(5ms));     // false once 5 ms have passed
//     co_await (e | ev::resume_on(io.get_executor())); // resumed by an asio executor
//     co_await (e | ev::cancel_on(stop.get_token()));  // Cancelled once stop is requested
//   }
// @endcode
//
// State machine of one co_await (the wait behind it, src/core/async_wait.hpp)
// ----------------------------------------------------------------------------
//   co_await ──▶ READY? ── yes: the events have decided it already (finished, failed, the stop
//                 │          requested): no suspension, no allocation, nothing registered
//                 └ no ──▶ ARMING: one callback per event (Event::add_callback), the timer,
//                            the stop callback ──▶ SUSPENDED ──▶ DECIDED by the first of:
//                            the events (all of them; one failed; any one), the deadline, the
//                            stop, or the frame being destroyed ──▶ the rest withdrawn
//                            (remove_callback, the timer cancelled) ──▶ RESUMED once
//   A decision made while ARMING (an event finished meanwhile, the token stopped) resumes the
//   coroutine without suspending it (await_suspend returns false): it is resumed exactly once,
//   either by that return or by the decider, never both (one atomic word settles it).
//
// Results. `co_await event` / `tensor` / `when_all(...)`: void, and rethrows the work's error
// (an OpError, a UserEvent's fail(e)); when_all resumes as soon as one of its events is seen
// failed, with that error (at the co_await itself: the first failed in list order), as
// Python's wait_all_async does, else once all have finished. `when_any(...)`: the index of
// the first event seen finished (failed ones count; at the co_await: the lowest among those
// finished). With `| timeout(d)` or `| deadline(t)`: bool (false: the time ran out) for an
// event, a tensor or when_all; std::optional<std::size_t> (nullopt) for when_any. Cancelled:
// throws eventide::Cancelled (errors.hpp), whatever the form. An EMPTY event is the
// StateError that wait() throws (it would never finish); an undefined tensor and an empty
// when_any are InvalidArgument, at the call.
//
// Where the coroutine resumes. By default on eventide's callback thread of the event's device
// (the thread Event::add_callback's callbacks run on: for when_all the device of the event
// that finished last; after a timeout or a stop, the first event's device), inside that
// callback, with no runtime lock held, never on a stream's worker or a GPU's watcher, and
// never inside the thread that calls UserEvent::set() or request_stop(). This is the cheapest
// (no hand-off: as fast as a callback), and it costs the device's other callbacks: until the
// coroutine suspends again they wait, so a coroutine resumed there must not block (a blocking
// wait there can deadlock on a callback queued behind it). `| resume_on(executor)` hands the
// resumption to `executor` from that callback thread instead: one post (an asio executor,
// a thread pool: anything with execute(f), post(f), or a call operator taking f); the cost is
// the executor's hand-off (a wake-up of its thread), and the coroutine runs where its other
// work runs. The executor is kept (a copy) until the resumption: a work-tracking asio
// executor (asio::prefer(ex, asio::execution::outstanding_work.tracked)) keeps io.run()
// going meanwhile; a plain one does not.
//
// Cancellation. `| cancel_on(token)` (or, without it, the coroutine's own token when its
// promise has get_stop_token()): when stop is requested, the wait is withdrawn (each callback
// taken back with remove_callback; one already handed to the callback thread finds the wait
// over and does nothing; the timer cancelled) and the coroutine resumes, where it would have,
// with eventide::Cancelled. A stop requested after the events decided changes nothing (the
// first decision wins). Destroying the frame of a coroutine suspended here withdraws its wait
// the same way, and it is never resumed afterwards. What is left behind either way: nothing
// of the coroutine's; the events, their work and their other callbacks are untouched, and the
// wait's own memory (a small block) is freed once a callback already handed over has run.
// Resuming and destroying one coroutine must not race, as for any coroutine: destroy it on
// the thread it resumes on (the executor's, or the callback thread), or while its wait cannot
// finish. A frame destroyed before the executor ran the resumption posted to it is safe: the
// posted task sees it and does nothing; one destroyed after its wait was decided (a stop, a
// timeout) but before the callback thread handed it over is never handed to its executor.
//
// Thread-safety: an awaitable is a value (it holds event handles); awaiting one from several
// coroutines at once awaits copies. Memory ordering: what the awaited work wrote and what the
// host did before UserEvent::set() is visible to the coroutine once it resumes (the event's
// own guarantee, carried through the callback thread and the executor's hand-off).
// Lifetime: the awaitable holds its events, so the work can be dropped meanwhile.
//
// Process exit: callbacks still queued are dropped (event.hpp), so a coroutine still waiting
// then is not resumed, and its frame is left to its owner.
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <vector>

#include "eventide/detail/callback.hpp"
#include "eventide/errors.hpp"
#include "eventide/event.hpp"
#include "eventide/tensor.hpp"

namespace eventide {

namespace detail {

class AsyncWait;  // src/core/async_wait.hpp

// all: every event (a failure decides at once); any: the first one.
enum class WaitRule : std::uint8_t { all, any };
enum class WaitEnd : std::uint8_t { finished, failed, timed_out, cancelled };

struct WaitOutcome {
  WaitEnd end = WaitEnd::finished;
  std::size_t index = 0;     // any: the event that finished; failed: the one that failed
  std::exception_ptr error;  // failed: its error
};

// The outcome if the events decide the wait now (nothing is registered), else nullopt.
std::optional<WaitOutcome> ready_outcome(std::span<const Event> events, WaitRule rule);
// StateError naming `what` ("co_await") and the event if one of `events` is EMPTY.
void check_not_empty(std::span<const Event> events, const char* what);
// An event tied to the tensor's producer; InvalidArgument naming `what` if it is undefined.
Event event_of(const Tensor& tensor, const char* what);
// Throws Cancelled naming what was awaited; cancelled_error: the same, as an exception_ptr.
[[noreturn]] void throw_cancelled(std::span<const Event> events, WaitRule rule, const char* what);
std::exception_ptr cancelled_error(std::span<const Event> events, WaitRule rule, const char* what);

// A reference to the wait behind an awaiter (copies share it). Every member is noexcept but
// make(), set_delivery() and arm(); see the state machine above and src/core/async_wait.hpp.
class WaitHandle {
 public:
  WaitHandle() noexcept = default;
  WaitHandle(const WaitHandle& other) noexcept;
  WaitHandle(WaitHandle&& other) noexcept : wait_(std::exchange(other.wait_, nullptr)) {}
  WaitHandle& operator=(WaitHandle other) noexcept {
    std::swap(wait_, other.wait_);
    return *this;
  }
  ~WaitHandle();

  // A wait on `events` (not empty, none EMPTY), nothing registered yet. `cancellable`: cancel()
  // may be called (it and the deadline need a task made now, so that neither allocates).
  static WaitHandle make(std::span<const Event> events, WaitRule rule,
                         std::optional<std::chrono::steady_clock::time_point> deadline,
                         bool cancellable);
  // Another reference to `wait` (a posted resumption's).
  static WaitHandle share(AsyncWait* wait) noexcept;

  // What happens, once, on the callback thread when a decision is made after arm() returned
  // true; one of the two, set before arm(). set_resume: the coroutine resumes right there
  // (the default place: nothing kept but the handle). set_delivery: `delivery` runs there (a
  // post to an executor, an asio completion); std::bad_alloc.
  void set_resume(std::coroutine_handle<> coroutine) noexcept;
  void set_delivery(Callback delivery);
  // Registers the callbacks and the timer. True: suspended, the delivery will run. False: it
  // was decided meanwhile (outcome() is set, everything withdrawn, no delivery). Throws what
  // add_callback or the timer throws, with whatever it registered withdrawn.
  [[nodiscard]] bool arm();
  // The stop: decides the wait as cancelled unless it was decided.
  void cancel() noexcept;
  // The frame is destroyed while suspended: withdraws the wait unless it was decided, and a
  // delivery still to come never resumes it (begin_resume() is false).
  void abandon() noexcept;
  // Called right before resuming: false if the frame was abandoned (or resumed already).
  [[nodiscard]] bool begin_resume() noexcept;
  // The delivery could not hand the coroutine over (the executor threw): the coroutine
  // resumes with `error` instead. Only after begin_resume() said yes (nobody else reads it).
  void fail_delivery(std::exception_ptr error) noexcept;
  // Runs the delivery now, on this thread (an asio operation decided while arming).
  void deliver() noexcept;
  [[nodiscard]] const WaitOutcome& outcome() const noexcept;

  AsyncWait* get() const noexcept { return wait_; }
  explicit operator bool() const noexcept { return wait_ != nullptr; }

 private:
  explicit WaitHandle(AsyncWait* adopted) noexcept : wait_(adopted) {}
  AsyncWait* wait_ = nullptr;
};

// The resumption handed to a resume_on executor: a copyable, noexcept-movable callable.
class ResumeTask {
 public:
  ResumeTask(std::coroutine_handle<> coroutine, WaitHandle wait) noexcept
      : coroutine_(coroutine), wait_(std::move(wait)) {}
  void operator()() {
    if (wait_.begin_resume()) coroutine_.resume();
  }

 private:
  std::coroutine_handle<> coroutine_;
  WaitHandle wait_;
};

template <class Ex>
concept PostsCallables =
    std::copy_constructible<Ex> &&
    (requires(Ex& ex, ResumeTask task) { ex.execute(std::move(task)); } ||
     requires(Ex& ex, ResumeTask task) { ex.post(std::move(task)); } ||
     std::invocable<Ex&, ResumeTask>);

template <class Ex>
void post_to(Ex& ex, ResumeTask task) {
  if constexpr (requires { ex.execute(std::move(task)); }) {
    ex.execute(std::move(task));
  } else if constexpr (requires { ex.post(std::move(task)); }) {
    ex.post(std::move(task));
  } else {
    ex(std::move(task));
  }
}

// The default place: the callback thread itself.
struct CallbackThread {};

template <class P>
concept PromiseWithStopToken = requires(P& p) {
  { p.get_stop_token() } -> std::convertible_to<std::stop_token>;
};

template <class T>
concept AwaitSource = std::derived_from<std::remove_cvref_t<T>, Event> ||
                      std::same_as<std::remove_cvref_t<T>, Tensor>;

// The events of an awaitable: one is kept inline (no allocation for `co_await e`).
class EventList {
 public:
  EventList(Event one) : one_(std::move(one)) {}  // NOLINT(google-explicit-constructor)
  EventList(std::vector<Event> many) : many_(std::move(many)) {}  // NOLINT(google-explicit-constructor)
  std::span<const Event> span() const noexcept {
    return one_ ? std::span<const Event>(&*one_, 1) : std::span<const Event>(many_);
  }

 private:
  std::optional<Event> one_;
  std::vector<Event> many_;
};

inline Event as_event(const Event& e) { return e; }
inline Event as_event(const Tensor& t) { return event_of(t, "co_await"); }

}  // namespace detail

// Where the coroutine resumes: see the header comment. `executor` is copied.
template <class Executor>
struct ResumeOn {
  Executor executor;
};
template <class Executor>
[[nodiscard]] ResumeOn<std::decay_t<Executor>> resume_on(Executor&& executor) {
  static_assert(detail::PostsCallables<std::decay_t<Executor>>,
                "eventide::resume_on: the executor must be copyable and take a callable through "
                "execute(f) (asio's executors), post(f) (a thread pool), or its call operator");
  return {std::forward<Executor>(executor)};
}

// Cancels the wait when stop is requested on `token`.
struct CancelOn {
  std::stop_token token;
};
[[nodiscard]] inline CancelOn cancel_on(std::stop_token token) noexcept { return {std::move(token)}; }

// The timeout form: the wait gives up at `at` (steady clock).
struct WaitDeadline {
  std::chrono::steady_clock::time_point at;
};
[[nodiscard]] inline WaitDeadline deadline(std::chrono::steady_clock::time_point at) noexcept { return {at}; }
// Any duration; those beyond what the clock holds mean no time limit.
template <class Rep, class Period>
[[nodiscard]] WaitDeadline timeout(std::chrono::duration<Rep, Period> d) noexcept {
  using Clock = std::chrono::steady_clock;
  const std::chrono::nanoseconds ns = detail::saturating_ns(d);
  const Clock::time_point now = Clock::now();
  if (ns > Clock::time_point::max() - now) return {Clock::time_point::max()};
  return {now + ns};
}

template <detail::WaitRule Rule, bool Timed, class Executor>
class Awaiter;

// What co_await takes: events, a rule, and the options. Made by when_all, when_any, or an
// option applied to an event or a tensor (`e | ev::timeout(5ms)`); options chain.
template <detail::WaitRule Rule, bool Timed = false, class Executor = detail::CallbackThread>
class [[nodiscard]] Awaitable {
 public:
  Awaitable(detail::EventList events, std::optional<std::chrono::steady_clock::time_point> deadline,
            std::optional<std::stop_token> stop, Executor executor)
      : events_(std::move(events)),
        deadline_(deadline),
        stop_(std::move(stop)),
        executor_(std::move(executor)) {}

  template <class Ex>
  Awaitable<Rule, Timed, Ex> operator|(ResumeOn<Ex> where) && {
    return {std::move(events_), deadline_, std::move(stop_), std::move(where.executor)};
  }
  Awaitable operator|(CancelOn cancel) && {
    stop_ = std::move(cancel.token);
    return std::move(*this);
  }
  Awaitable<Rule, true, Executor> operator|(WaitDeadline d) && {
    return {std::move(events_), d.at, std::move(stop_), std::move(executor_)};
  }
  template <class Option>
  auto operator|(Option option) const& {
    return Awaitable(*this) | std::move(option);
  }

  Awaiter<Rule, Timed, Executor> operator co_await() && { return Awaiter<Rule, Timed, Executor>(std::move(*this)); }
  Awaiter<Rule, Timed, Executor> operator co_await() const& { return Awaiter<Rule, Timed, Executor>(Awaitable(*this)); }

  // What is awaited (for eventide/asio.hpp, which runs the same wait as an asio operation).
  std::span<const Event> events() const noexcept { return events_.span(); }
  const std::optional<std::chrono::steady_clock::time_point>& deadline() const noexcept { return deadline_; }
  const std::optional<std::stop_token>& stop_token() const noexcept { return stop_; }

 private:
  template <detail::WaitRule, bool, class>
  friend class Awaiter;
  template <detail::WaitRule, bool, class>
  friend class Awaitable;

  detail::EventList events_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::optional<std::stop_token> stop_;  // given by cancel_on: the promise's is not asked
  Executor executor_;
};

// The awaiter co_await uses (not made by hand). Not movable: it lives in the coroutine's frame
// while suspended, and the wait's callbacks find the coroutine through it.
template <detail::WaitRule Rule, bool Timed, class Executor>
class Awaiter {
 public:
  using Spec = Awaitable<Rule, Timed, Executor>;
  explicit Awaiter(Spec spec) : spec_(std::move(spec)) {}
  Awaiter(const Awaiter&) = delete;
  Awaiter& operator=(const Awaiter&) = delete;
  ~Awaiter() {
    if (suspended_) {  // the frame is destroyed while suspended here
      stop_callback_.reset();
      wait_.abandon();
    }
  }

  bool await_ready() {
    detail::check_not_empty(spec_.events_.span(), "co_await");
    if (spec_.stop_ && spec_.stop_->stop_requested()) {
      ready_ = detail::WaitOutcome{detail::WaitEnd::cancelled, 0, nullptr};
      return true;
    }
    ready_ = detail::ready_outcome(spec_.events_.span(), Rule);
    if constexpr (Timed) {
      if (!ready_ && std::chrono::steady_clock::now() >= *spec_.deadline_) {
        ready_ = detail::WaitOutcome{detail::WaitEnd::timed_out, 0, nullptr};
      }
    }
    return ready_.has_value();
  }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> coroutine) {
    std::stop_token stop;
    if (spec_.stop_) {
      stop = *spec_.stop_;
    } else if constexpr (detail::PromiseWithStopToken<Promise>) {
      stop = coroutine.promise().get_stop_token();
    }
    if (stop.stop_requested()) {
      ready_ = detail::WaitOutcome{detail::WaitEnd::cancelled, 0, nullptr};
      return false;
    }
    wait_ = detail::WaitHandle::make(spec_.events_.span(), Rule, spec_.deadline_, stop.stop_possible());
    if constexpr (std::is_same_v<Executor, detail::CallbackThread>) {
      wait_.set_resume(coroutine);
    } else {
      wait_.set_delivery(ResumeVia{coroutine, wait_.get(), spec_.executor_});
    }
    suspended_ = true;  // before anything can resume the coroutine
    try {
      // A stop requested already, or meanwhile, decides the wait before or while it arms. Made
      // only for a token that can stop: most waits have none, and it is a third of an awaiter.
      if (stop.stop_possible()) {
        stop_callback_ = std::make_unique<std::stop_callback<StopFn>>(std::move(stop), StopFn{wait_});
      }
      if (wait_.arm()) return true;  // `this` may be gone from here on: touch nothing
    } catch (...) {
      suspended_ = false;
      stop_callback_.reset();
      throw;
    }
    suspended_ = false;
    return false;
  }

  // With a timeout the result says whether the work finished: dropping it is a bug.
  [[nodiscard]] auto await_resume()
    requires Timed
  {
    return resume_result();
  }
  auto await_resume()
    requires(!Timed)
  {
    return resume_result();
  }

 private:
  auto resume_result() {
    suspended_ = false;
    stop_callback_.reset();  // waits for a stop callback running on another thread, if any
    const detail::WaitOutcome outcome = ready_ ? *ready_ : wait_.outcome();
    wait_ = detail::WaitHandle();
    switch (outcome.end) {
      case detail::WaitEnd::cancelled: detail::throw_cancelled(spec_.events_.span(), Rule, "co_await");
      // when_any: a failed event counts as finished, so `failed` is the delivery's own error
      // (the executor refused the resumption), rethrown as when_all's.
      case detail::WaitEnd::failed: std::rethrow_exception(outcome.error);
      case detail::WaitEnd::timed_out:
      case detail::WaitEnd::finished: break;
    }
    const bool finished = outcome.end != detail::WaitEnd::timed_out;
    if constexpr (Rule == detail::WaitRule::any) {
      if constexpr (Timed) {
        return finished ? std::optional<std::size_t>(outcome.index) : std::nullopt;
      } else {
        return outcome.index;
      }
    } else if constexpr (Timed) {
      return finished;
    } else {
      return;
    }
  }

  // The stop callback: the wait is kept alive by wait_, which outlives it (declared after it).
  struct StopFn {
    detail::WaitHandle wait;
    void operator()() noexcept { wait.cancel(); }
  };
  // Runs on the callback thread (held by whoever runs it): posts the resumption to the
  // executor.
  struct ResumeVia {
    std::coroutine_handle<> coroutine;
    detail::AsyncWait* wait;
    Executor executor;
    void operator()() {
      detail::WaitHandle self = detail::WaitHandle::share(wait);
      try {
        detail::post_to(executor, detail::ResumeTask(coroutine, self));
      } catch (...) {
        // The executor refused (out of memory, shut down): resuming here, with the reason, is
        // better than a coroutine that never resumes. Unless the task reached the executor
        // before it threw, and runs (or ran): then the outcome is that task's to read.
        if (self.begin_resume()) {
          self.fail_delivery(std::current_exception());
          coroutine.resume();
        }
      }
    }
  };

  Spec spec_;
  std::optional<detail::WaitOutcome> ready_;
  detail::WaitHandle wait_;
  std::unique_ptr<std::stop_callback<StopFn>> stop_callback_;  // after wait_: destroyed first
  bool suspended_ = false;
};

// `co_await event` (a UserEvent too) and `co_await tensor`: see the header comment.
inline Awaiter<detail::WaitRule::all, false, detail::CallbackThread> operator co_await(const Event& event) {
  return Awaiter<detail::WaitRule::all, false, detail::CallbackThread>({event, std::nullopt, std::nullopt, {}});
}
inline Awaiter<detail::WaitRule::all, false, detail::CallbackThread> operator co_await(const Tensor& tensor) {
  return Awaiter<detail::WaitRule::all, false, detail::CallbackThread>(
      {detail::as_event(tensor), std::nullopt, std::nullopt, {}});
}

// An option applied to an event or a tensor: `co_await (e | ev::timeout(5ms))`.
namespace detail {
template <class T>
inline constexpr bool is_wait_option = std::is_same_v<T, CancelOn> || std::is_same_v<T, WaitDeadline>;
template <class Ex>
inline constexpr bool is_wait_option<ResumeOn<Ex>> = true;
}  // namespace detail

template <detail::AwaitSource Source, class Option>
  requires detail::is_wait_option<Option>
auto operator|(const Source& source, Option option) {
  return Awaitable<detail::WaitRule::all>(detail::as_event(source), std::nullopt, std::nullopt, {}) |
         std::move(option);
}

// Every one of the events and tensors (void; rethrows the first failure seen). With no
// arguments, ready at once.
//
// @code
//   co_await ev::when_all(ev::matmul(a, b), ev::matmul(c, d), user_event);
// @endcode
template <detail::AwaitSource... Sources>
Awaitable<detail::WaitRule::all> when_all(const Sources&... sources) {
  return {std::vector<Event>{detail::as_event(sources)...}, std::nullopt, std::nullopt, {}};
}
Awaitable<detail::WaitRule::all> when_all(std::span<const Event> events);
Awaitable<detail::WaitRule::all> when_all(std::span<const Tensor> tensors);

// The first of the events and tensors to finish: its index. InvalidArgument for none.
//
// @code
//   std::size_t i = co_await ev::when_any(fast, slow);
//   std::optional<std::size_t> j = co_await (ev::when_any(fast, slow) | ev::timeout(1ms));
// @endcode
Awaitable<detail::WaitRule::any> when_any(std::span<const Event> events);
Awaitable<detail::WaitRule::any> when_any(std::span<const Tensor> tensors);
template <detail::AwaitSource... Sources>
  requires(sizeof...(Sources) > 0)
Awaitable<detail::WaitRule::any> when_any(const Sources&... sources) {
  return {std::vector<Event>{detail::as_event(sources)...}, std::nullopt, std::nullopt, {}};
}

}  // namespace eventide
