// AsyncWait (core/async_wait.hpp), and the WaitHandle of eventide/coro.hpp over it.
#include "core/async_wait.hpp"

#include <utility>

#include "core/event_state.hpp"
#include "core/runtime.hpp"

namespace eventide::detail {

AsyncWait::AsyncWait(std::span<const Event> events, WaitRule rule, Deadline deadline, bool cancellable)
    : rule_(rule), timed_(deadline.has_value()), remaining_(events.size()) {
  if (timed_) timer_.at = *deadline;
  regs_.reserve(events.size());
  for (const Event& e : events) regs_.push_back(Registration{e.state(), 0});
  // A decision off the callback thread (the deadline, a stop) is carried there by this task,
  // made now: the timer thread and a stop callback must not fail for want of memory.
  if (timed_ || cancellable) posted_ = std::make_unique<CallbackTask>(Callback(PostedDelivery{}));
}

bool AsyncWait::arm() {
  try {
    for (std::size_t i = 0; i < regs_.size(); ++i) {
      // Decided meanwhile (an event, a stop): the rest need not be registered.
      if (state_.load(std::memory_order_acquire) & kClaimed) break;
      regs_[i].callback = regs_[i].event->add_callback(
          Callback([self = Ref<AsyncWait>(this), i] { self->on_event(i); }));
      registered_ = i + 1;
    }
    if (timed_ && !(state_.load(std::memory_order_acquire) & kClaimed)) {
      timer_ = TimerQueue::get().schedule(timer_.at, Callback([self = Ref<AsyncWait>(this)] {
        self->on_deadline();
      }));
    }
  } catch (...) {
    // Nobody may deliver now (ARMED is never set); take back what was registered.
    claim();
    withdraw(kNone);
    throw;
  }
  const std::uint32_t before = state_.fetch_or(kArmed, std::memory_order_acq_rel);
  if (before & kDecided) {
    // Decided while arming: the awaiter goes on without suspending (it still holds this).
    withdraw(kNone);
    return false;
  }
  // Suspended: a decision from here on delivers, and may resume the coroutine on another
  // thread at once, whose awaiter then lets go of this. Nothing here may be touched now.
  return true;
}

void AsyncWait::on_event(std::size_t i) noexcept {
  const std::uint32_t now = state_.load(std::memory_order_acquire);
  if (now & kClaimed) return;  // decided: just let go
  std::exception_ptr error;
  if (rule_ == WaitRule::all) {
    // The status first (one atomic load once finished): the error's lock only for a failure.
    if (regs_[i].event->status() == EventStatus::failed) {
      try {
        error = regs_[i].event->error();
      } catch (...) {
        error = std::current_exception();  // out of memory, as good a reason as any
      }
    }
    if (!error && regs_.size() > 1 && remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  }
  WaitOutcome outcome{error ? WaitEnd::failed : WaitEnd::finished, rule_ == WaitRule::any || error ? i : 0,
                      std::move(error)};
  if (now & kArmed) {
    // Armed: arm() is over and reads nothing more, so claiming and deciding can be one step;
    // outcome_ is then read only by the delivery below, after it is written.
    if (state_.fetch_or(kClaimed | kDecided, std::memory_order_acq_rel) & kClaimed) return;
    outcome_ = std::move(outcome);
    withdraw(i);
    deliver();
    return;
  }
  if (!claim()) return;
  outcome_ = std::move(outcome);
  decided(true, i);
}

void AsyncWait::on_deadline() noexcept {
  if (!claim()) return;
  outcome_ = WaitOutcome{WaitEnd::timed_out, 0, nullptr};
  decided(false, kNone);
}

void AsyncWait::cancel() noexcept {
  if (!claim()) return;
  outcome_ = WaitOutcome{WaitEnd::cancelled, 0, nullptr};
  decided(false, kNone);
}

void AsyncWait::abandon() noexcept {
  const std::uint32_t before = state_.fetch_or(kAbandoned | kClaimed, std::memory_order_acq_rel);
  // Decided: the delivery on its way finds ABANDONED and hands nothing to the executor.
  if (before & kClaimed) return;
  // Undecided: nobody will deliver, so take everything back, and let go of the delivery (the
  // executor's copy) here, with the frame, not whenever a callback in flight lets go of this.
  withdraw(kNone);
  delivery_.reset();
}

void AsyncWait::decided(bool here, std::size_t skip) noexcept {
  // The caller holds a reference (a callback's, the timer's, the stop callback's awaiter's).
  const std::uint32_t before = state_.fetch_or(kDecided, std::memory_order_acq_rel);
  if (!(before & kArmed)) return;  // arm() will find DECIDED and not suspend
  withdraw(skip);
  if (here) {
    deliver();
  } else {
    post_delivery();
  }
}

void AsyncWait::withdraw(std::size_t skip) noexcept {
  for (std::size_t i = 0; i < registered_; ++i) {
    // False if the callback has been handed to the callback thread: it runs, finds CLAIMED.
    if (i != skip) (void)regs_[i].event->remove_callback(regs_[i].callback);
  }
  if (timer_.id != 0) (void)TimerQueue::get().cancel(timer_);
}

void AsyncWait::deliver() noexcept {
  // The caller holds a reference: this outlives a resumed coroutine that lets go of its own.
  const std::coroutine_handle<> resume = std::exchange(resume_, nullptr);
  const std::unique_ptr<Callback> delivery = std::move(delivery_);
  try {
    if (resume) {
      if (begin_resume()) resume.resume();  // false: the frame is gone
    } else if (delivery && *delivery) {
      // The frame was destroyed after the decision: nothing may reach its executor now (what
      // the executor refers to often goes with the frame). Its copy is destroyed here.
      if (!(state_.load(std::memory_order_acquire) & kAbandoned)) (*delivery)();
    }
  } catch (...) {
    // An exception out of a resumed coroutine's body (its promise rethrew it): as a callback's.
    report_callback_error(std::current_exception(), regs_.empty() ? nullptr : regs_[0].event.get());
  }
}

void AsyncWait::post_delivery() noexcept {
  if (!posted_) {  // not made (cannot happen: only a deadline or a stop gets here)
    deliver();
    return;
  }
  posted_->fn.target<PostedDelivery>()->wait = Ref<AsyncWait>(this);
  CallbackList task;
  task.push_back(std::move(posted_));
  const std::shared_ptr<EventState>& first = regs_[0].event;
  std::optional<Device> device;
  try {
    device = first->device();
  } catch (...) {
    // (It takes a lock and copies a value: it does not throw in practice.)
  }
  // Dropped at process exit (the dispatcher has stopped), as every queued callback is.
  Runtime::get().dispatcher(device).post(std::move(task), first);
}

// --- WaitHandle (eventide/coro.hpp) ------------------------------------------------------

WaitHandle::WaitHandle(const WaitHandle& other) noexcept : wait_(other.wait_) {
  if (wait_) wait_->add_ref();
}

WaitHandle::~WaitHandle() {
  if (wait_) wait_->release();
}

WaitHandle WaitHandle::make(std::span<const Event> events, WaitRule rule,
                            std::optional<std::chrono::steady_clock::time_point> deadline,
                            bool cancellable) {
  Ref<AsyncWait> w = make_ref<AsyncWait>(events, rule, deadline, cancellable);
  return WaitHandle(w.detach());
}

WaitHandle WaitHandle::share(AsyncWait* wait) noexcept {
  if (wait) wait->add_ref();
  return WaitHandle(wait);
}

void WaitHandle::set_resume(std::coroutine_handle<> coroutine) noexcept { wait_->set_resume(coroutine); }
void WaitHandle::set_delivery(Callback delivery) { wait_->set_delivery(std::move(delivery)); }
bool WaitHandle::arm() { return wait_->arm(); }
void WaitHandle::cancel() noexcept { wait_->cancel(); }
void WaitHandle::abandon() noexcept {
  if (wait_) wait_->abandon();
}
bool WaitHandle::begin_resume() noexcept { return wait_->begin_resume(); }
void WaitHandle::fail_delivery(std::exception_ptr error) noexcept { wait_->fail_delivery(std::move(error)); }
void WaitHandle::deliver() noexcept { wait_->deliver(); }
const WaitOutcome& WaitHandle::outcome() const noexcept { return wait_->outcome(); }

}  // namespace eventide::detail
