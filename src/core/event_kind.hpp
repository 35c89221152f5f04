// EventKind: what makes an event more than a plain one, plugged into its EventState
// (core/event_state.hpp) instead of written into it. A plain Event has no kind (null: its
// paths pay nothing for the others). A kind is given when the state is made and lives as
// long as it does.
//
// The kinds, each in its own file:
//   UserRounds (core/user_event.cpp)   a UserEvent: one host step per round, which set(),
//                                      fail() or the last handle's going away finishes;
//                                      reset() starts the next round, PENDING at once.
//   HostVerdict (ipc/gpu_path.cpp)     an imported event's verdict from another process:
//                                      host waits, poll and callbacks wait for it, a stream's
//                                      wait leaves it out (it orders after a GPU-side marker).
//
// A new kind of event writes a subclass in its own file, and overrides only the hooks it
// needs; EventState calls them at the points named below.
//
// Thread-safety: the hooks marked "under the event's lock" are called with EventState's
// mutex held: they read or write the kind's own fields, never call back into the event, never
// block, allocate or throw. reset() is called with no runtime lock held.
#pragma once

#include <string_view>

#include "core/ref.hpp"
#include "core/work.hpp"

namespace eventide::detail {

class EventState;

class EventKind {
 public:
  virtual ~EventKind() = default;

  // How the event is named in its str() ("UserEvent" for "<UserEvent pending on cpu>"), and
  // whether the number of records is shown there (a plain event's "2 ops").
  virtual std::string_view type_name() const noexcept { return "Event"; }
  virtual bool shows_records() const noexcept { return true; }

  // Event reset(). By default the plain reset (EventState::reset_to_empty: StateError while
  // pending, else EMPTY). A kind whose reset starts its next round at once takes its own
  // lock, then calls EventState::restart() with it, which calls begin_round_locked() below
  // and lets go of that lock before it wakes anyone.
  virtual void reset(EventState& event);
  // Under the event's lock, from EventState::restart(): makes the next round current and
  // returns its work, not finished, which the event is then tied to alone.
  virtual Ref<Work> begin_round_locked() noexcept { return nullptr; }
  // Under the event's lock: the event has been cleared (a reset to EMPTY): the kind forgets
  // what it knew of the records.
  virtual void cleared() noexcept {}

  // Under the event's lock: whether a stream's wait on the event leaves out `work`, one of
  // its pending records (EventState::snapshot for a stream wait). Once `work` has finished,
  // its error counts for streams like any other's.
  virtual bool hidden_from_streams(const Work& work) const noexcept {
    (void)work;
    return false;
  }
  // Under the event's lock: whether only handles of this kind can finish the event now (a
  // UserEvent whose step is pending): for Python's cycle collector, which may break a cycle
  // through a callback only then (EventState::visit_callbacks_held_by_handles).
  virtual bool finished_only_by_handles() const noexcept { return false; }
};

}  // namespace eventide::detail
