// AsyncWait: the wait behind a co_await (eventide/coro.hpp) and an asio operation
// (eventide/asio.hpp): one callback on each of its events, an optional deadline on the
// TimerQueue, an optional stop, and a delivery that runs once when it is decided.
//
// State: one atomic word of bits, each only ever set.
//   ARMED      arm() has registered everything (the awaiter has suspended, or is about to)
//   CLAIMED    someone decides: the event callback that completes the rule, the timer, the
//              stop (cancel), or the frame's destruction (abandon). The first to set it is
//              the only one that writes outcome_.
//   DECIDED    outcome_ is written (set by the claimer after writing it)
//   ABANDONED  the frame is gone: a delivery still to come must not resume it
//   RESUMING   begin_resume() has said yes (once)
//
// Who resumes, exactly once: the claimer sets DECIDED (an event callback that finds ARMED set
// already sets CLAIMED and DECIDED in one step: nobody reads outcome_ but its own delivery); if ARMED was set already, it withdraws
// the rest and runs the delivery (from an event callback: inline, on the callback thread; from
// the timer or a stop: through a task posted to the first event's callback thread, made in
// advance so that nothing allocates there). If ARMED was not yet set, arm() finds DECIDED when
// it sets ARMED, withdraws the rest and returns false: the awaiter does not suspend. One
// fetch_or each side settles which.
//
// Withdrawing: remove_callback on each registered event (one already handed to the callback
// thread runs later, finds CLAIMED, and only lets go of its reference) and cancel on the timer
// (one already running finds CLAIMED too). Whoever decides withdraws: nobody else reads the
// registrations then.
//
// Thread-safety: arm() on the awaiting thread; the callbacks on callback threads; the timer on
// the timer thread; cancel() on whichever thread requests the stop; abandon() on the thread
// destroying the frame. Memory ordering: the registrations (regs_, timer_) are written before
// ARMED is set (acq_rel) and read only by a claimer that saw ARMED; outcome_ is written before
// DECIDED (acq_rel) and read after seeing it (arm()), or after the delivery, which follows it
// on the claimer's thread or behind the dispatcher's lock.
//
// Lifetime: reference-counted: the awaiter (WaitHandle), each registered callback, the timer
// entry and a posted delivery hold it. No cycle outlives the wait: the event's callback is
// taken back or runs, the timer is cancelled or fires. Never destroyed under a runtime lock:
// the last reference goes with a callable that the dispatcher, remove_callback or the timer
// destroys unlocked, or with the awaiter.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "core/dispatcher.hpp"
#include "core/parker.hpp"
#include "core/ref.hpp"
#include "core/small_vector.hpp"
#include "core/timer.hpp"
#include "eventide/coro.hpp"
#include "eventide/event.hpp"

namespace eventide::detail {

class EventState;

class AsyncWait final : public RefCounted {
 public:
  // std::bad_alloc. `cancellable`: cancel() may be called.
  AsyncWait(std::span<const Event> events, WaitRule rule, Deadline deadline, bool cancellable);

  void set_resume(std::coroutine_handle<> coroutine) noexcept { resume_ = coroutine; }
  void set_delivery(Callback delivery) { delivery_ = std::make_unique<Callback>(std::move(delivery)); }
  bool arm();
  void cancel() noexcept;
  void abandon() noexcept;
  bool begin_resume() noexcept {
    return (state_.fetch_or(kResuming, std::memory_order_acq_rel) & (kAbandoned | kResuming)) == 0;
  }
  void fail_delivery(std::exception_ptr error) noexcept {
    outcome_ = WaitOutcome{WaitEnd::failed, 0, std::move(error)};
  }
  void deliver() noexcept;
  const WaitOutcome& outcome() const noexcept { return outcome_; }

 private:
  static constexpr std::uint32_t kArmed = 1;
  static constexpr std::uint32_t kClaimed = 2;
  static constexpr std::uint32_t kDecided = 4;
  static constexpr std::uint32_t kAbandoned = 8;
  static constexpr std::uint32_t kResuming = 16;

  // The task that carries a delivery decided off the callback thread to it.
  struct PostedDelivery {
    Ref<AsyncWait> wait;  // set when posted
    void operator()() {
      Ref<AsyncWait> w = std::move(wait);
      w->deliver();
    }
  };
  struct Registration {
    std::shared_ptr<EventState> event;
    std::uint64_t callback = 0;  // the id add_callback gave
  };

  void on_event(std::size_t i) noexcept;
  void on_deadline() noexcept;
  bool claim() noexcept { return (state_.fetch_or(kClaimed, std::memory_order_acq_rel) & kClaimed) == 0; }
  // After claim() and writing outcome_: hands over (see the header comment). `here`: on a
  // callback thread already (an event's callback).
  void decided(bool here, std::size_t skip) noexcept;
  // Takes back every registration but the `skip`th (the caller's own callback).
  void withdraw(std::size_t skip) noexcept;
  void post_delivery() noexcept;

  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  // Packed: 10,000 coroutines on one event are 10,000 of these (docs/PERFORMANCE.md).
  std::atomic<std::uint32_t> state_{0};
  const WaitRule rule_;
  const bool timed_;                    // timer_.at is the deadline
  std::atomic<std::size_t> remaining_;  // all: events not yet seen finished
  SmallVector<Registration, 1> regs_;
  std::size_t registered_ = 0;  // written by arm() before ARMED
  TimerQueue::Key timer_;       // at: the deadline; id: written by arm() before ARMED
  WaitOutcome outcome_;         // written by the claimer before DECIDED
  // The delivery: the coroutine to resume on the callback thread, or a callable (the
  // executor's post, an asio completion), allocated only for those.
  std::coroutine_handle<> resume_;
  std::unique_ptr<Callback> delivery_;
  std::unique_ptr<CallbackTask> posted_;  // one PostedDelivery task, made by the constructor if needed
};

}  // namespace eventide::detail
