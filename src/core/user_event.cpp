// UserEvent: an event recorded on a host timeline (core/user_event.hpp), one step per round,
// which host code finishes (set, fail) or the last handle's going away fails (abandon).
#include "core/user_event.hpp"

#include <atomic>
#include <string>

#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/event.hpp"

namespace eventide {
namespace detail {

namespace {

std::atomic<std::uint64_t> g_next_user_event_id{1};

// A round's step: a host Work with no body, finished by finish_step().
Ref<Work> make_step_on(const Ref<Timeline>& timeline) {
  return make_ref<Work>(timeline, "set", WorkKind::host);
}

}  // namespace

// --- UserTimeline ------------------------------------------------------------------------

UserTimeline::UserTimeline()
    : timeline_(make_ref<Timeline>("user event " + std::to_string(g_next_user_event_id++))),
      step_(make_step_on(timeline_)) {
  step_->set_seq(1);
}

Ref<Work> UserTimeline::make_step() const { return make_step_on(timeline_); }

void UserTimeline::begin_round(Ref<Work> next) noexcept {
  next->set_seq(step_->seq() + 1);
  step_ = std::move(next);
}

void UserTimeline::finish_step(std::exception_ptr error) noexcept {
  Work& w = *step_;
  const std::int64_t now = host_now_ns();
  w.set_times(now, now);
  w.set_error(std::move(error));
  // Fires listeners inline (the event's own among them); they take the event's lock, not mu_.
  w.timeline().advance(w.seq());
}

UserEventSetter::~UserEventSetter() { state_->user_abandon(); }

// --- EventState: the UserEvent's operations ----------------------------------------------

std::shared_ptr<EventState> EventState::make_user(std::optional<Device> device,
                                                  EventOptions options) {
  auto state = std::make_shared<EventState>(device, options);
  state->user_ = std::make_unique<UserTimeline>();
  // Recorded on round 1's step (unfinished: nothing to fold, nobody to arm for yet).
  state->pending_.push_back(state->user_->step());
  state->records_ = 1;
  state->status_.store(EventStatus::pending, std::memory_order_release);
  return state;
}

void EventState::start_next_round(Actions& actions) {
  // Made first: out of memory, the event is left as it was.
  Ref<Work> next = user_->make_step();
  std::lock_guard round_lock(user_->mu());
  std::lock_guard lock(mu_);
  refresh_locked(actions);
  if (!finished_locked()) {
    throw StateError("cannot reset " + str_locked() +
                     " while it is pending: set() or fail() it first");
  }
  clear_locked();  // keeps pending_'s room: the push below does not allocate
  user_->begin_round(std::move(next));
  pending_.push_back(user_->step());
  records_ = 1;
  status_.store(EventStatus::pending, std::memory_order_release);
}

void EventState::user_finish(std::exception_ptr error, UserStep step) {
  std::lock_guard round_lock(user_->mu());
  const Work& w = *user_->step();
  if (w.done()) {
    if (step == UserStep::set && !w.error()) return;  // set() twice: idempotent
    throw StateError(std::string(step == UserStep::set ? "set" : "fail") + ": " + str() +
                     " has already " + (w.error() ? "failed" : "been set") + "; reset() it first");
  }
  user_->finish_step(std::move(error));
}

void EventState::user_set() { user_finish(nullptr, UserStep::set); }

void EventState::user_fail(std::exception_ptr error) {
  if (!error) throw InvalidArgument("UserEvent::fail needs an error (got a null exception_ptr)");
  user_finish(std::move(error), UserStep::fail);
}

void EventState::user_abandon() noexcept {
  std::lock_guard round_lock(user_->mu());
  if (user_->step()->done()) return;
  // It fails whatever happens: without memory for the message, with the bad_alloc.
  std::exception_ptr error;
  try {
    error = std::make_exception_ptr(
        StateError("a UserEvent was destroyed without being set (" + user_->name() +
                   "): whatever waited on it can never go on"));
  } catch (...) {
    error = std::current_exception();
  }
  user_->finish_step(std::move(error));
}

}  // namespace detail

// --- UserEvent ---------------------------------------------------------------------------

UserEvent::UserEvent() : UserEvent(std::nullopt) {}

UserEvent::UserEvent(std::optional<Device> device, EventOptions options)
    : Event(detail::EventState::make_user(device, options)) {
  if (device) detail::Runtime::get().context(*device);
  setter_ = std::make_shared<detail::UserEventSetter>(state());
}

void UserEvent::set() { state()->user_set(); }
void UserEvent::fail(std::exception_ptr error) { state()->user_fail(std::move(error)); }
void UserEvent::reset() { state()->reset(); }
void UserEvent::abandon() noexcept { state()->user_abandon(); }

int UserEvent::visit_pending_callbacks_impl(int (*visit)(void* context, detail::Callback& callback),
                                            void* context) {
  return state()->visit_callbacks_held_by_handles(
      [&](detail::Callback& callback) { return visit(context, callback); });
}

}  // namespace eventide
