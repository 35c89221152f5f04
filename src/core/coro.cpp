// The awaitables of eventide/coro.hpp that are not templates: what decides a wait at once,
// the checks and their messages, when_all and when_any over lists. The wait itself is
// core/async_wait.cpp.
#include <string>

#include "core/event_state.hpp"
#include "eventide/coro.hpp"
#include "eventide/errors.hpp"

namespace eventide {
namespace detail {

std::optional<WaitOutcome> ready_outcome(std::span<const Event> events, WaitRule rule) {
  if (rule == WaitRule::any) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].poll()) return WaitOutcome{WaitEnd::finished, i, nullptr};
    }
    return std::nullopt;
  }
  bool all = true;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!events[i].poll()) {
      all = false;
      continue;
    }
    // A failure decides at once, pending events or not (as wait_all_async).
    if (std::exception_ptr error = events[i].error()) return WaitOutcome{WaitEnd::failed, i, error};
  }
  if (all) return WaitOutcome{WaitEnd::finished, 0, nullptr};
  return std::nullopt;
}

void check_not_empty(std::span<const Event> events, const char* what) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].state()->status() != EventStatus::empty) continue;
    if (events.size() == 1) {
      throw StateError(std::string("cannot ") + what + " an empty event (" + events[i].str() +
                       "): record work on it first, or it would never finish");
    }
    throw StateError(std::string(what) + ": event " + std::to_string(i) + " (" + events[i].str() +
                     ") is empty and would never finish: record work on it first");
  }
}

Event event_of(const Tensor& tensor, const char* what) {
  if (!tensor.defined()) {
    throw InvalidArgument(std::string(what) + ": the tensor is undefined (default-constructed): "
                          "no op produced it, so there is nothing to wait for");
  }
  Event e(tensor.device());
  e.record(tensor);
  return e;
}

namespace {
Cancelled make_cancelled(std::span<const Event> events, WaitRule rule, const char* what) {
  std::string awaited;
  if (events.size() == 1) {
    awaited = events[0].str();
  } else {
    awaited = std::string(rule == WaitRule::all ? "when_all" : "when_any") + " of " +
              std::to_string(events.size()) + " events";
  }
  return Cancelled(std::string(what) + " " + awaited +
                   ": cancelled, its stop was requested (the events and their work are untouched)");
}
}  // namespace

void throw_cancelled(std::span<const Event> events, WaitRule rule, const char* what) {
  throw make_cancelled(events, rule, what);
}

std::exception_ptr cancelled_error(std::span<const Event> events, WaitRule rule, const char* what) {
  return std::make_exception_ptr(make_cancelled(events, rule, what));
}

namespace {
std::vector<Event> events_of(std::span<const Tensor> tensors, const char* what) {
  std::vector<Event> events;
  events.reserve(tensors.size());
  for (const Tensor& t : tensors) events.push_back(event_of(t, what));
  return events;
}
}  // namespace

}  // namespace detail

Awaitable<detail::WaitRule::all> when_all(std::span<const Event> events) {
  return {std::vector<Event>(events.begin(), events.end()), std::nullopt, std::nullopt, {}};
}

Awaitable<detail::WaitRule::all> when_all(std::span<const Tensor> tensors) {
  return {detail::events_of(tensors, "when_all"), std::nullopt, std::nullopt, {}};
}

Awaitable<detail::WaitRule::any> when_any(std::span<const Event> events) {
  if (events.empty()) throw InvalidArgument("when_any: the list of events is empty: nothing could finish first");
  return {std::vector<Event>(events.begin(), events.end()), std::nullopt, std::nullopt, {}};
}

Awaitable<detail::WaitRule::any> when_any(std::span<const Tensor> tensors) {
  if (tensors.empty()) throw InvalidArgument("when_any: the list of tensors is empty: nothing could finish first");
  return {detail::events_of(tensors, "when_any"), std::nullopt, std::nullopt, {}};
}

}  // namespace eventide
