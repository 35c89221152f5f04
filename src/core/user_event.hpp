// The host side of a UserEvent: a UserEvent is an EventState (core/event_state.hpp) recorded
// on a private host timeline that host code advances, one Work per round.
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
// Thread-safety: `mu()` serializes set, fail, abandon and reset (the step only changes under
// it and, for reset, also under the event's lock). Finishing a step advances the timeline,
// which fires its listeners inline (the event's own among them: they take the event's lock,
// never `mu()`), so nothing that holds the event's lock may take `mu()`.
//
// Memory ordering: the timeline's advance is a release, and every reader of a step (the
// event's poll, a stream's dependency check) acquires it: what the host did before set() is
// visible to whoever sees the event finished.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "core/ref.hpp"
#include "core/runtime_lock.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"

namespace eventide::detail {

class EventState;

class UserTimeline {
 public:
  // Round 1: a pending step, numbered 1, on a timeline named "user event <n>".
  UserTimeline();

  // The current round's step. Read under mu() or under the event's lock.
  const Ref<Work>& step() const noexcept { return step_; }
  // The next round's step, not numbered yet: made before any lock is taken, since it
  // allocates (out of memory, the event is left as it was).
  Ref<Work> make_step() const;
  // Makes `next` (from make_step()) the current step, numbered after the current one. Under
  // mu() and the event's lock.
  void begin_round(Ref<Work> next) noexcept;
  // Finishes the current step now, with `error` (null: set): advances the timeline, firing
  // its listeners inline. Under mu(), with the event's lock not held.
  void finish_step(std::exception_ptr error) noexcept;

  // "user event 7".
  const std::string& name() const noexcept { return timeline_->name(); }
  RuntimeMutex& mu() noexcept { return mu_; }

 private:
  Ref<Timeline> timeline_;
  Ref<Work> step_;
  RuntimeMutex mu_;
};

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
