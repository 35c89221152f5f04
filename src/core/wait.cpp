// Waiting: an event's wait (EventState::wait_until: spin on the tied work, then park until
// the event's listener wakes this thread), a fence's (wait_for_fence: Tensor::wait,
// synchronize), and wait_all / wait_any over several events. See core/wait.hpp.
#include <algorithm>
#include <utility>
#include <vector>

#include "core/event_state.hpp"
#include "core/nvtx.hpp"
#include "core/observer.hpp"
#include "core/small_vector.hpp"
#include "core/timeline.hpp"
#include "core/wait.hpp"
#include "eventide/errors.hpp"
#include "eventide/event.hpp"

namespace eventide {
namespace detail {

namespace {

bool wait_for_pending_fence(Timeline& timeline, std::uint64_t seq, const Deadline& deadline) {
  timeline.demand(seq, Demand::now);  // a device that publishes late publishes it first
  if (spin_until([&] { return timeline.passed(seq); }, deadline)) return true;
  const Ref<Parker>& parker = this_thread_parker();
  // Out of memory for the wake-up: the waiter looks at the timeline between short naps.
  const bool heard = timeline.unpark_when_passed(seq, parker);
  WaitPacer pacer(timeline.device_written());
  BlockingRegion blocking;  // a pool thread lets its pool run other work meanwhile
  while (!timeline.passed(seq)) {
    if (expired(deadline)) return false;
    if (heard) {
      pacer.park(*parker, deadline);
    } else {
      const Clock::time_point nap = Clock::now() + Timeline::kUnheardNap;
      parker->park(deadline && *deadline < nap ? deadline : Deadline(nap));
    }
  }
  return true;
}

}  // namespace

bool wait_for_fence(Timeline& timeline, std::uint64_t seq, const Deadline& deadline) {
  if (timeline.passed(seq)) {
    if (Observer* o = observer()) [[unlikely]] o->on_wait_found_done(WaitTarget::of_fence(timeline, seq));
    return true;
  }
  check_not_waiting_on_self(timeline, seq);
  Observer* const o = observer();
  if (!o || expired(deadline)) [[likely]] return wait_for_pending_fence(timeline, seq, deadline);
  const std::int64_t start = host_now_ns();
  const bool done = wait_for_pending_fence(timeline, seq, deadline);
  o->on_host_wait(WaitTarget::of_fence(timeline, seq), {}, start, host_now_ns(),
                  done ? WaitResult::finished : WaitResult::timed_out);
  return done;
}

void EventState::demand(Demand how) noexcept {
  SmallVector<Ref<Work>, 2> now;  // published outside the lock: it writes to a device
  {
    std::lock_guard lock(mu_);
    for (const Ref<Work>& w : pending_) {
      if (w->done()) continue;
      try {
        if (how == Demand::now) {
          now.push_back(w);
          continue;
        }
      } catch (...) {
        // Out of memory for the list: the watcher publishes it instead, at its next turn.
      }
      w->timeline().demand(w->seq(), Demand::soon);
    }
  }
  for (const Ref<Work>& w : now) w->timeline().demand(w->seq(), Demand::now);
}

bool EventState::wait_until(const Deadline& deadline) {
  const std::uint64_t finished_before = finishes();
  if (poll()) {
    if (Observer* o = observer()) [[unlikely]] o->on_wait_found_done(WaitTarget::of_event(*this));
    return true;
  }
  Observer* const o = observer();
  if (!o || expired(deadline)) [[likely]] return wait_pending(deadline, finished_before);
  // An observed host wait: when, and for which ops.
  std::vector<Ref<Work>> ops;
  {
    std::lock_guard lock(mu_);
    ops.assign(pending_.begin(), pending_.end());
  }
  const std::int64_t start = host_now_ns();
  const bool done = wait_pending(deadline, finished_before);
  o->on_host_wait(WaitTarget::of_event(*this), ops, start, host_now_ns(),
                  done ? WaitResult::finished : WaitResult::timed_out);
  return done;
}

bool EventState::wait_pending(const Deadline& deadline, std::uint64_t finished_before) {
  if (status_.load(std::memory_order_acquire) == EventStatus::empty) {
    throw StateError("cannot wait on an empty event (" + str() +
                     "): record work on it first, or it would never finish");
  }
  if (expired(deadline)) return false;  // a zero timeout is a poll
  // Spin on the work itself before registering to be woken: a GPU writes its progress into
  // memory this thread can read, and nobody else need be involved. The spin reads the Works'
  // counters directly (a snapshot), not through the event's lock.
  bool device_written = false;
  {
    SmallVector<Ref<Work>, 2> watch;
    {
      std::lock_guard lock(mu_);
      for (const Ref<Work>& w : pending_) watch.push_back(w);
    }
    for (const Ref<Work>& w : watch) {
      device_written = device_written || w->timeline().device_written();
      w->timeline().demand(w->seq(), Demand::now);  // a device that publishes late publishes it first
    }
    auto all_done = [&] {
      for (const Ref<Work>& w : watch) {
        if (!w->done()) return false;
      }
      return true;
    };
    // A blocking event (EventOptions::blocking) does not spin: it parks at once.
    if (!blocking_ &&
        spin_until([&] { return all_done() || finishes() != finished_before; }, deadline) &&
        (poll() || finishes() != finished_before)) {
      return true;
    }
  }
  if (running_work()) {
    std::lock_guard lock(mu_);
    for (const Ref<Work>& w : pending_) check_not_waiting_on_self(w->timeline(), w->seq());
  }
  const Ref<Parker>& parker = this_thread_parker();
  if (!add_notifier(parker)) return true;
  WaitPacer pacer(device_written);
  BlockingRegion blocking;  // a pool thread lets its pool run other work meanwhile
  for (;;) {
    // A completion wakes this waiter even if the event was recorded again before it ran
    // (notifiers are handed over at each completion, so it would not be woken again).
    if (poll() || finishes() != finished_before) break;
    if (status_.load(std::memory_order_acquire) == EventStatus::empty) {
      remove_notifier(parker.get());
      throw StateError("the event was reset by another thread while this one waited on it");
    }
    if (expired(deadline)) {
      remove_notifier(parker.get());
      return false;
    }
    pacer.park(*parker, deadline);
  }
  remove_notifier(parker.get());
  return true;
}

}  // namespace detail

// --- Event::wait ------------------------------------------------------------------------

void Event::wait() const {
  detail::nvtx::Scope range("wait");
  state_->wait_until(std::nullopt);
  if (auto e = state_->error()) std::rethrow_exception(e);
}

bool Event::wait_for(std::chrono::nanoseconds timeout) const {
  return wait_until_deadline(detail::deadline_after(timeout));
}

bool Event::wait_until(std::chrono::steady_clock::time_point deadline) const {
  return wait_until_deadline(deadline);
}

bool Event::wait_until_deadline(const std::optional<std::chrono::steady_clock::time_point>& deadline) const {
  detail::nvtx::Scope range("wait");
  if (!state_->wait_until(deadline)) return false;
  if (auto e = state_->error()) std::rethrow_exception(e);
  return true;
}

// --- wait_all / wait_any -----------------------------------------------------------------

namespace {

void check_not_empty(std::span<const Event> events, const char* fn) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].state()->status() == EventStatus::empty) {
      throw StateError(std::string(fn) + ": event " + std::to_string(i) + " (" + events[i].str() +
                       ") is empty and would never finish");
    }
  }
}

bool wait_all_by(std::span<const Event> events, const detail::Deadline& deadline) {
  detail::nvtx::Scope range("wait_all");
  check_not_empty(events, "wait_all");
  for (const Event& e : events) {
    if (!e.state()->wait_until(deadline)) return false;
  }
  for (const Event& e : events) {
    if (auto err = e.state()->error()) std::rethrow_exception(err);
  }
  return true;
}

}  // namespace

void wait_all(std::span<const Event> events) { (void)wait_all_by(events, std::nullopt); }
void wait_all(std::initializer_list<Event> events) {
  wait_all(std::span<const Event>(events.begin(), events.size()));
}
bool wait_all_for(std::span<const Event> events, std::chrono::nanoseconds timeout) {
  return wait_all_by(events, detail::deadline_after(timeout));
}
bool wait_all_until(std::span<const Event> events, std::chrono::steady_clock::time_point deadline) {
  return wait_all_by(events, deadline);
}
bool wait_all_until(std::initializer_list<Event> events, std::chrono::steady_clock::time_point deadline) {
  return wait_all_by(std::span<const Event>(events.begin(), events.size()), deadline);
}
bool wait_all_for(std::initializer_list<Event> events, std::chrono::nanoseconds timeout) {
  return wait_all_for(std::span<const Event>(events.begin(), events.size()), timeout);
}

namespace {

std::optional<std::size_t> wait_any_by(std::span<const Event> events, const detail::Deadline& deadline) {
  detail::nvtx::Scope range("wait_any");
  if (events.empty()) throw InvalidArgument("wait_any: the list of events is empty");
  check_not_empty(events, "wait_any");
  // One entry per distinct event, at its lowest index: a list may repeat one event many times,
  // and registering with it once per copy made the wait quadratic in the copies.
  struct Entry {
    detail::EventState* state;
    std::size_t index;
    std::uint64_t finished_before;
  };
  std::vector<Entry> entries;
  entries.reserve(events.size());
  {
    std::vector<std::pair<detail::EventState*, std::size_t>> by_state;
    by_state.reserve(events.size());
    for (std::size_t i = 0; i < events.size(); ++i) by_state.emplace_back(events[i].state().get(), i);
    std::sort(by_state.begin(), by_state.end());  // by state, then index
    for (std::size_t i = 0; i < by_state.size(); ++i) {
      if (i == 0 || by_state[i].first != by_state[i - 1].first) {
        entries.push_back(Entry{by_state[i].first, by_state[i].second, by_state[i].first->finishes()});
      }
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.index < b.index; });
  }
  // Finished, or finished since the call began even if recorded again since (see
  // EventState::wait_until): the lowest such index.
  auto first_finished_since = [&]() -> std::optional<std::size_t> {
    for (const Entry& e : entries) {
      if (e.state->poll() || e.state->finishes() != e.finished_before) return e.index;
    }
    return std::nullopt;
  };
  if (auto i = first_finished_since()) return i;
  if (detail::expired(deadline)) return std::nullopt;
  for (const Entry& e : entries) e.state->demand(detail::Demand::now);
  std::optional<std::size_t> spun;
  if (detail::spin_until([&] { return (spun = first_finished_since()).has_value(); }, deadline)) {
    return spun;
  }
  const auto& parker = detail::this_thread_parker();
  std::size_t registered = 0;
  auto unregister = [&] {
    for (std::size_t i = 0; i < registered; ++i) entries[i].state->remove_notifier(parker.get());
  };
  std::optional<std::size_t> result;
  try {
    for (; registered < entries.size(); ++registered) {
      if (!entries[registered].state->add_notifier(parker)) break;  // finished meanwhile
    }
  } catch (...) {
    unregister();  // out of memory: no registration is left behind
    throw;
  }
  detail::BlockingRegion blocking;  // a pool thread lets its pool run other work meanwhile
  for (;;) {
    if ((result = first_finished_since())) break;
    if (detail::expired(deadline)) break;
    parker->park(deadline);
  }
  unregister();
  return result;
}

}  // namespace

std::optional<std::size_t> wait_any(std::span<const Event> events,
                                    std::optional<std::chrono::nanoseconds> timeout) {
  return wait_any_by(events, detail::deadline_after(timeout));
}
std::optional<std::size_t> wait_any(std::initializer_list<Event> events,
                                    std::optional<std::chrono::nanoseconds> timeout) {
  return wait_any(std::span<const Event>(events.begin(), events.size()), timeout);
}
std::optional<std::size_t> wait_any_until(std::span<const Event> events,
                                          std::chrono::steady_clock::time_point deadline) {
  return wait_any_by(events, deadline);
}
std::optional<std::size_t> wait_any_until(std::initializer_list<Event> events,
                                          std::chrono::steady_clock::time_point deadline) {
  return wait_any_by(std::span<const Event>(events.begin(), events.size()), deadline);
}

}  // namespace eventide
