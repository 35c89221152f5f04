// A UserEvent's kind (core/event_kind.hpp): a UserEvent is an EventState recorded on a
// private host timeline that host code advances, one step (a Work) per round.
//
// State machine of a round (the event's own is in eventide/event.hpp):
//
//     step pending ── set() ────────▶ step done (no error): the event FINISHES
//          │      ── fail(e) ───────▶ step done (error e):  the event FAILS
//          │      ── last UserEvent handle goes (abandon) ─▶ step done (StateError "never set")
//          └──────── reset() once done: the next round's step, numbered one higher, pending
//
// A stream that waited on round 3 depends on round 3's step, so a set() of round 4 does not
// release it.
//
// Thread-safety: the round lock (`mu_`) serializes set, fail, abandon and reset; the step
// only changes under it and, for reset, also under the event's lock. Finishing a step
// advances the timeline, which fires its listeners inline (the event's own among them: they
// take the event's lock, never the round lock), so nothing that holds the event's lock may
// take the round lock.
//
// Memory ordering: the timeline's advance is a release, and every reader of a step (the
// event's poll, a stream's dependency check) acquires it: what the host did before set() is
// visible to whoever sees the event finished.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string_view>

#include "core/event_kind.hpp"
#include "core/ref.hpp"
#include "core/runtime_lock.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"
#include "eventide/event.hpp"

namespace eventide::detail {

class EventState;

class UserRounds final : public EventKind {
 public:
  // No round yet: make_user_event_state() starts round 1. The timeline is named
  // "user event <n>".
  UserRounds();

  std::string_view type_name() const noexcept override { return "UserEvent"; }
  bool shows_records() const noexcept override { return false; }
  // The next round, PENDING at once; StateError while the current one is pending.
  void reset(EventState& event) override;
  Ref<Work> begin_round_locked() noexcept override;
  // The current step is pending: only set, fail or the last handle going away finish it.
  bool finished_only_by_handles() const noexcept override { return step_ && !step_->done(); }

  // The operations of UserEvent `event` (whose kind this is). set: idempotent once set,
  // StateError if the round failed. fail: InvalidArgument for a null error, StateError if
  // the round is done.
  void set(EventState& event);
  void fail(EventState& event, std::exception_ptr error);
  // Fails the current round if unset: the last UserEvent handle is gone. Never throws.
  void abandon() noexcept;

 private:
  enum class Step { set, fail };
  void finish(EventState& event, std::exception_ptr error, Step how);
  // Finishes the current step now, with `error` (null: set): advances the timeline, firing
  // its listeners inline. Under mu_, with the event's lock not held.
  void finish_step(std::exception_ptr error) noexcept;

  Ref<Timeline> timeline_;
  Ref<Work> step_;  // the current round's; null before round 1. Read under mu_ or the event's lock
  Ref<Work> next_;  // the next round's, made by reset() before any lock is taken (it allocates)
  RuntimeMutex mu_;
};

// A UserEvent's state: of kind UserRounds, PENDING from the start (round 1).
std::shared_ptr<EventState> make_user_event_state(std::optional<Device> device, EventOptions options);
// The kind of a state made by make_user_event_state().
UserRounds& rounds_of(EventState& state) noexcept;

// Held by UserEvent handles only (not by plain Event copies): when the last one goes, an
// unset event fails instead of leaving its waiters waiting forever.
class UserEventSetter {
 public:
  explicit UserEventSetter(std::shared_ptr<EventState> state) noexcept : state_(std::move(state)) {}
  ~UserEventSetter();
  UserEventSetter(const UserEventSetter&) = delete;
  UserEventSetter& operator=(const UserEventSetter&) = delete;

 private:
  std::shared_ptr<EventState> state_;
};

}  // namespace eventide::detail
