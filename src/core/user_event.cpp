// UserEvent: an event of kind UserRounds (core/user_event.hpp), one host step per round, which
// host code finishes (set, fail) or the last handle's going away fails (abandon).
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

}  // namespace

// --- UserRounds --------------------------------------------------------------------------

UserRounds::UserRounds()
    : timeline_(make_ref<Timeline>("user event " + std::to_string(g_next_user_event_id++))) {}

void UserRounds::reset(EventState& event) {
  // A round's step: a host Work with no body, finished by finish_step(). Made first: out of
  // memory, the event is left as it was.
  Ref<Work> next = make_ref<Work>(timeline_, "set", WorkKind::host);
  std::unique_lock round_lock(mu_);
  next_ = std::move(next);
  // Calls begin_round_locked() under the event's lock; lets go of the round lock before it
  // wakes anyone.
  event.restart("set() or fail() it first", round_lock);
}

Ref<Work> UserRounds::begin_round_locked() noexcept {
  next_->set_seq(step_ ? step_->seq() + 1 : 1);
  step_ = std::move(next_);
  return step_;
}

void UserRounds::finish_step(std::exception_ptr error) noexcept {
  Work& w = *step_;
  const std::int64_t now = host_now_ns();
  w.set_times(now, now);
  w.set_error(std::move(error));
  // Fires listeners inline (the event's own among them); they take the event's lock, not mu_.
  w.timeline().advance(w.seq());
}

void UserRounds::finish(EventState& event, std::exception_ptr error, Step how) {
  std::lock_guard round_lock(mu_);
  const Work& w = *step_;
  if (w.done()) {
    if (how == Step::set && !w.error()) return;  // set() twice: idempotent
    throw StateError(std::string(how == Step::set ? "set" : "fail") + ": " + event.str() +
                     " has already " + (w.error() ? "failed" : "been set") + "; reset() it first");
  }
  finish_step(std::move(error));
}

void UserRounds::set(EventState& event) { finish(event, nullptr, Step::set); }

void UserRounds::fail(EventState& event, std::exception_ptr error) {
  if (!error) throw InvalidArgument("UserEvent::fail needs an error (got a null exception_ptr)");
  finish(event, std::move(error), Step::fail);
}

void UserRounds::abandon() noexcept {
  std::lock_guard round_lock(mu_);
  if (step_->done()) return;
  // It fails whatever happens: without memory for the message, with the bad_alloc.
  std::exception_ptr error;
  try {
    error = std::make_exception_ptr(
        StateError("a UserEvent was destroyed without being set (" + timeline_->name() +
                   "): whatever waited on it can never go on"));
  } catch (...) {
    error = std::current_exception();
  }
  finish_step(std::move(error));
}

std::shared_ptr<EventState> make_user_event_state(std::optional<Device> device,
                                                  EventOptions options) {
  auto state = std::make_shared<EventState>(device, options, std::make_unique<UserRounds>());
  rounds_of(*state).reset(*state);  // round 1: the state is EMPTY, nothing to wait for
  return state;
}

UserRounds& rounds_of(EventState& state) noexcept { return static_cast<UserRounds&>(*state.kind()); }

UserEventSetter::~UserEventSetter() { rounds_of(*state_).abandon(); }

}  // namespace detail

// --- UserEvent ---------------------------------------------------------------------------

UserEvent::UserEvent() : UserEvent(std::nullopt) {}

UserEvent::UserEvent(std::optional<Device> device, EventOptions options)
    : Event(detail::make_user_event_state(device, options)) {
  if (device) detail::Runtime::get().context(*device);
  setter_ = std::make_shared<detail::UserEventSetter>(state());
}

void UserEvent::set() { detail::rounds_of(*state()).set(*state()); }
void UserEvent::fail(std::exception_ptr error) {
  detail::rounds_of(*state()).fail(*state(), std::move(error));
}
void UserEvent::reset() { state()->reset(); }
void UserEvent::abandon() noexcept { detail::rounds_of(*state()).abandon(); }

int UserEvent::visit_pending_callbacks_impl(int (*visit)(void* context, detail::Callback& callback),
                                            void* context) {
  return state()->visit_callbacks_held_by_handles(
      [&](detail::Callback& callback) { return visit(context, callback); });
}

}  // namespace eventide
