// eventide/event.hpp: events, the way the host, streams and callbacks learn that device work
// is done and how long it took.
//
// State machine
// -------------
//               record(...)                 all tied work done
//     EMPTY ─────────────────────▶ PENDING ─────────────────────▶ FINISHED (or FAILED)
//       ▲                             ▲                                │
//       │                             └─────── record(...) ────────────┤
//       └──────────────────────────── reset() ─────────────────────────┘
//
// * A new event is EMPTY: `completed()` is false, and waiting on it is a StateError (it
//   would never finish).
// * `record` ties the event to device work: the op that produced a tensor, or a *marker* at
//   the current end of a stream, which finishes when the device reaches it (after everything
//   enqueued there before it, on a GPU by any code: eventide, PyTorch, your own kernels) and
//   carries the device time at which it was reached. Records accumulate: the event finishes
//   when all the work tied since the last `reset` has finished. Recording more work on a
//   FINISHED event makes it PENDING again.
// * FAILED is FINISHED with an error: some tied work threw, or was skipped because its
//   inputs failed. `wait` rethrows that error; `error()` returns it.
// * `reset` returns to EMPTY; on a PENDING event it is a StateError.
//
// A `UserEvent` is finished by host code instead of device work: it starts PENDING, `set()`
// finishes it and `fail(e)` fails it; streams can wait on it (`Stream::wait`). When the last
// `UserEvent` handle to an unset event is destroyed, the event fails ("never set"), so that
// nothing waits on it forever.
//
// Thread-safety: every member may be called from any number of threads at once. `Event` is
// a cheap handle; copies share one event.
//
// Memory ordering: everything the tied device work wrote (tensor contents) and everything
// the host did before `UserEvent::set()` is visible to a thread after `wait()` or a true
// `poll()` returns, and inside the event's callbacks.
//
// Lifetime: dropping the last handle never blocks and never cancels work; callbacks already
// added still run when the work finishes.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "eventide/detail/callback.hpp"
#include "eventide/detail/duration.hpp"
#include "eventide/device.hpp"

namespace eventide {

class Tensor;
class Stream;

}  // namespace eventide

// CUDA's event type (cudaEvent_t and CUevent are `CUevent_st*`), named without CUDA's headers.
struct CUevent_st;

namespace eventide {

namespace detail {
class EventState;
class UserEventSetter;
}  // namespace detail

enum class EventStatus { empty, pending, finished, failed };

std::string_view name(EventStatus status) noexcept;

struct EventOptions {
  // Keep the device time of tied work, for time_elapsed() and elapsed_time(). Costs nothing
  // on the CPU; off, those two calls are StateErrors.
  bool enable_timing = true;
  // Host waits on the event sleep from the start instead of spinning a few microseconds first
  // (PyTorch's blocking=True, CUDA's cudaEventBlockingSync): a core stays free for others, at
  // the cost of a wake-up's latency (docs/PERFORMANCE.md: tens of µs instead of a few).
  bool blocking = false;
  // The event is meant to cross processes (PyTorch's interprocess=True): export_event() of it
  // is expected, and the Python Event.ipc_handle() gives its handle. Any event can be
  // exported; an imported one keeps no device times.
  bool interprocess = false;
};

// @code
//   ev::Tensor out = ev::matmul(ev::randn({512, 512}), ev::randn({512, 512}));
//   ev::Event e;
//   e.record(out);  // ties e to the matmul; returns at once
//   e.wait();       // blocks until the matmul has finished
//   double us = e.time_elapsed().count();
// @endcode
class Event {
 public:
  // An EMPTY event whose device is set by its first record.
  Event();
  // An EMPTY event bound to `device` (nullopt: set by the first record). Recording work of
  // another device is an InvalidArgument.
  explicit Event(std::optional<Device> device, EventOptions options = {});

  // An event standing for a native event of another library or of your own CUDA code (a
  // cudaEvent_t: torch.cuda.Event's, CuPy's, Numba's), as it is now: it finishes once the GPU
  // has passed the native event's most recent record (the one a cudaStreamWaitEvent issued
  // now would wait for; a never-recorded native event is passed at once), and fails if the
  // device fails. Host waits, poll, callbacks and `await` work on it as on any event, without
  // a busy loop; Stream::wait of it is a wait on the GPU, with no host round trip. Made by a
  // GPU-side wait for the native event on an internal stream of `device`, then a marker
  // there (its time: when the GPU passed the native event). The native event may be recorded
  // again or destroyed afterwards: what counts was taken at this call. Never blocks.
  // InvalidArgument for a device without native events (the CPU) or a handle the device's
  // runtime refuses (not an event of this process).
  //
  //   cudaEventRecord(done, my_stream);                     // the user's own CUDA work
  //   ev::Event e = ev::Event::from_native(done, ev::Device::cuda(0));
  //   e.add_callback([] { /* runs once the GPU passed `done` */ });
  static Event from_native(CUevent_st* native_event, Device device, EventOptions options = {});
  static Event from_native(std::nullptr_t, Device, EventOptions = {}) = delete;

  // A native event (a cudaEvent_t on CUDA) that the GPU passes once all the work tied to this
  // event so far has finished, for CUDA code and other libraries to wait on, on the GPU
  // (cudaStreamWaitEvent) or the host. Made at the first call (on an internal stream of the
  // event's device, after a GPU-side wait for the tied work) and recorded again at each call,
  // covering what is tied by then; it belongs to the event and lives as long as the event
  // does (its last handle), so keep the Event while others may wait on it. Never blocks.
  // StateError for an EMPTY event (a native event never recorded reads as passed), for work
  // still held on the host (behind a UserEvent or a CPU op: the GPU cannot be told to wait
  // for it; wait for it first) and for an event of a device without native events (the CPU).
  [[nodiscard]] CUevent_st* native_handle() const;

  // Ties the event to the op that produced (last wrote) `tensor`; that op may already be
  // done. Never blocks. Throws InvalidArgument for an undefined tensor or a device mismatch.
  void record(const Tensor& tensor);
  // Places a marker at the current end of `stream` and ties the event to it: it finishes
  // when the device reaches the marker, so it covers all work enqueued there before it (on a
  // GPU also the work other code launched on the native stream), and its time is the device
  // time at which it was reached. Works on every stream: new, busy, drained, or wrapping
  // another library's (Stream::from_native). Never blocks. Throws InvalidArgument for an event
  // of another device, StateError after the runtime has shut down.
  void record(const Stream& stream);
  // record(Stream::current(device)), device being the event's, else the innermost
  // StreamGuard's (as PyTorch's `with torch.cuda.stream(s)` makes s's device current), else
  // the default device.
  void record();

  // Blocks until the event finishes. Throws StateError if it is EMPTY, or the error of the
  // failed tied work.
  void wait() const;
  // Like wait(), up to `timeout`: true if finished, false on timeout.
  [[nodiscard]] bool wait_for(std::chrono::nanoseconds timeout) const;
  // Any duration; those beyond what nanoseconds hold (hours::max()) mean no time limit.
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return wait_for(detail::saturating_ns(timeout));
  }
  // Like wait(), until `deadline` on the steady clock (abseil's deadline form beside the
  // timeout form): true if finished, false once the deadline has passed.
  [[nodiscard]] bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  // PyTorch's spelling of wait().
  void synchronize() const { wait(); }

  // Non-blocking: true once all tied work has finished (also when it failed); false when
  // EMPTY or PENDING. Never throws.
  [[nodiscard]] bool poll() const noexcept;
  [[nodiscard]] bool completed() const noexcept { return poll(); }
  [[nodiscard]] bool query() const noexcept { return poll(); }
  [[nodiscard]] EventStatus status() const noexcept;

  // The device of the tied work; nullopt until the first record unless given.
  std::optional<Device> device() const;
  [[nodiscard]] bool timing_enabled() const noexcept;
  // The options the event was made with.
  [[nodiscard]] EventOptions options() const noexcept;

  // Device time from the start of the earliest tied work to the end of the latest. A marker
  // counts as a point (its start and end are when the device reached it): an event that
  // holds only markers reads the time between its earliest and latest one, 0 for one marker.
  // StateError if the event is not FINISHED or timing is disabled; rethrows the error of a
  // FAILED event.
  std::chrono::duration<double, std::micro> time_elapsed() const;
  // Device time from this event's completion to `end`'s (PyTorch's meaning; negative if `end`
  // finished first): between two markers, the time the device took from one to the other,
  // never time the host spent before the first. Both must be FINISHED, timed and on one
  // device; StateError for an event whose work has no device time (a tensor no op produced,
  // or GPU work with EVENTIDE_CUDA_TIMING=off).
  std::chrono::duration<double, std::milli> elapsed_time(const Event& end) const;

  // The error of the tied work if the event FAILED, else null.
  std::exception_ptr error() const;

  // Back to EMPTY (and to the device given at construction). StateError while PENDING.
  void reset();

  // Calls `fn` once when the event finishes (also when it fails), on a runtime thread, never
  // inside this call; at once (on that thread) if it has already finished. `fn` takes no
  // arguments and may call any eventide API, including error() on this event. The callable
  // is moved into the runtime. StateError on an EMPTY event (it would never be called);
  // InvalidArgument for a null callable. Returns the callback's id, for remove_callback.
  using CallbackId = std::uint64_t;
  template <class F>
  CallbackId add_callback(F&& fn) {
    if constexpr (detail::is_nullable_callable<std::decay_t<F>>) {
      if (fn == nullptr) throw_null_callback();
    }
    return add_callback_impl(detail::Callback(std::forward<F>(fn)));
  }
  // Takes back a callback that has not run (the event has not finished since it was added):
  // true, and it never runs; its callable is destroyed on this thread, with no runtime lock
  // held. False if it has run, runs or will run (exactly once), or if the id is not one of
  // this event's: harmless from any thread at any time. For a waiter that gives up (a
  // cancelled asyncio await).
  bool remove_callback(CallbackId id) noexcept;

  // "<Event pending on cpu, 2 ops>".
  std::string str() const;

  friend bool operator==(const Event& a, const Event& b) noexcept { return a.state_ == b.state_; }

  // For the runtime and bindings: the state, and a handle of a state the runtime made (an
  // event of a kind, core/event_kind.hpp).
  const std::shared_ptr<detail::EventState>& state() const noexcept { return state_; }
  static Event of_state(std::shared_ptr<detail::EventState> state) noexcept {
    return Event(std::move(state));
  }

 protected:
  explicit Event(std::shared_ptr<detail::EventState> state) noexcept : state_(std::move(state)) {}

 private:
  bool wait_until_deadline(const std::optional<std::chrono::steady_clock::time_point>& deadline) const;
  CallbackId add_callback_impl(detail::Callback fn);
  [[noreturn]] static void throw_null_callback();

  std::shared_ptr<detail::EventState> state_;
};

// An event finished by host code. Starts PENDING.
//
// @code
//   ev::UserEvent go;
//   ev::Stream s;
//   s.wait(go);  // later work on s starts once go is set; never blocks
//   go.set();    // or go.fail(std::make_exception_ptr(std::runtime_error("no input")))
// @endcode
class UserEvent : public Event {
 public:
  UserEvent();
  explicit UserEvent(std::optional<Device> device, EventOptions options = {});

  // Finishes the event: waiters wake, callbacks run, streams waiting on it go on. Idempotent
  // once set; StateError if the event has failed.
  void set();
  // Fails the event with `error` (non-null): waiters rethrow it, work gated on it fails with
  // an OpError whose cause() it is. StateError if the event has already finished.
  void fail(std::exception_ptr error);

  // After set() or fail(), reset() makes the event PENDING again, for the next round.
  void reset();

  // For the bindings: how many UserEvent handles share this event (this one and its copies;
  // plain Event copies do not count). When the last one goes, an unset event fails.
  long handle_count() const noexcept { return setter_.use_count(); }

  // For the bindings' garbage collectors: what dropping the last handle does, now. Fails the
  // event with a StateError ("destroyed without being set") if it is unset, so that waiters
  // wake, callbacks run once with the failure and gated streams fail; does nothing if it was
  // set or failed already. Afterwards set() and fail() are StateErrors until reset(). Never
  // throws, never blocks (its callbacks go to the callback thread).
  void abandon() noexcept;

  // For the bindings' garbage collectors (a callback that holds its own UserEvent is a cycle
  // only the collector can see): calls `visit(detail::Callback&)` on each callback waiting for
  // this event while only a UserEvent handle can still finish it, i.e. while the current round
  // is unset (set(), fail() or abandon() would finish it). Stops at the first non-zero result
  // and returns it; 0 when there is nothing to visit. Reports nothing once the round is set,
  // failed or abandoned (its callbacks are then the callback thread's, about to run) and for
  // callbacks already handed over. Every handle can finish the event: a binding that reports
  // per handle checks handle_count() == 1 first, so that each callable is reported once.
  // Runs under the event's lock: `visit` must not call eventide, nor release, move or add
  // anything; it may only look (Callback::target).
  //
  //   int r = u.visit_pending_callbacks([&](ev::detail::Callback& c) {
  //     if (auto* f = c.target<MyCallable>()) return report(f->object);
  //     return 0;
  //   });
  template <class F>
  int visit_pending_callbacks(F&& visit) {
    auto* fn = std::addressof(visit);
    using Fn = std::remove_reference_t<decltype(*fn)>;
    return visit_pending_callbacks_impl(
        [](void* context, detail::Callback& callback) -> int {
          return static_cast<int>((*static_cast<Fn*>(context))(callback));
        },
        const_cast<void*>(static_cast<const void*>(fn)));
  }

 private:
  int visit_pending_callbacks_impl(int (*visit)(void* context, detail::Callback& callback),
                                   void* context);

  std::shared_ptr<detail::UserEventSetter> setter_;
};

// Blocks until every event has finished. StateError if one is EMPTY; rethrows the first
// failure in list order once all have finished.
//
// @code
//   ev::Event e1, e2;
//   e1.record(ev::matmul(a, b));
//   e2.record(ev::matmul(c, d));
//   ev::wait_all({e1, e2});  // returns once both have finished
// @endcode
void wait_all(std::span<const Event> events);
void wait_all(std::initializer_list<Event> events);
// Like wait_all, up to `timeout`: false if some event had not finished by then.
[[nodiscard]] bool wait_all_for(std::span<const Event> events, std::chrono::nanoseconds timeout);
[[nodiscard]] bool wait_all_for(std::initializer_list<Event> events, std::chrono::nanoseconds timeout);
// Any duration; those beyond what nanoseconds hold mean no time limit.
template <class Rep, class Period>
[[nodiscard]] bool wait_all_for(std::span<const Event> events, std::chrono::duration<Rep, Period> timeout) {
  return wait_all_for(events, detail::saturating_ns(timeout));
}
template <class Rep, class Period>
[[nodiscard]] bool wait_all_for(std::initializer_list<Event> events, std::chrono::duration<Rep, Period> timeout) {
  return wait_all_for(events, detail::saturating_ns(timeout));
}

// Like wait_all, until `deadline` on the steady clock: false if some event had not finished
// by then.
[[nodiscard]] bool wait_all_until(std::span<const Event> events, std::chrono::steady_clock::time_point deadline);
[[nodiscard]] bool wait_all_until(std::initializer_list<Event> events, std::chrono::steady_clock::time_point deadline);

// Blocks until one of `events` has finished (also if it failed: check its error()) and
// returns its index, the lowest among those finished; nullopt on timeout. InvalidArgument for
// an empty list, StateError if one of them is EMPTY.
//
// @code
//   std::optional<std::size_t> first = ev::wait_any({e1, e2}, 20ms);
//   if (first) std::printf("e%zu finished first\n", *first + 1);
// @endcode
[[nodiscard]] std::optional<std::size_t> wait_any(std::span<const Event> events,
                                    std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
[[nodiscard]] std::optional<std::size_t> wait_any(std::initializer_list<Event> events,
                                    std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
// Any duration; those beyond what nanoseconds hold mean no time limit.
template <class Rep, class Period>
[[nodiscard]] std::optional<std::size_t> wait_any(std::span<const Event> events,
                                    std::chrono::duration<Rep, Period> timeout) {
  return wait_any(events, std::optional<std::chrono::nanoseconds>(detail::saturating_ns(timeout)));
}
template <class Rep, class Period>
[[nodiscard]] std::optional<std::size_t> wait_any(std::initializer_list<Event> events,
                                    std::chrono::duration<Rep, Period> timeout) {
  return wait_any(events, std::optional<std::chrono::nanoseconds>(detail::saturating_ns(timeout)));
}
// Like wait_any, until `deadline` on the steady clock: nullopt once it has passed.
[[nodiscard]] std::optional<std::size_t> wait_any_until(std::span<const Event> events,
                                                        std::chrono::steady_clock::time_point deadline);
[[nodiscard]] std::optional<std::size_t> wait_any_until(std::initializer_list<Event> events,
                                                        std::chrono::steady_clock::time_point deadline);

}  // namespace eventide
