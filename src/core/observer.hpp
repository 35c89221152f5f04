// Observer: what the core tells whoever watches it work (the profiler, src/profile/), through
// one process-wide pointer and a handful of named hooks, on the model of Taskflow's
// ObserverInterface. The core calls the hooks and knows nothing of what they record.
//
// States: no observer (g_observer null: the default) -> one installed (set_observer(p)) ->
// none again (set_observer(nullptr)). One at a time: installing replaces, so whoever installs
// keeps others out (a second Profiler is a StateError).
//
// Cost: every hook site on a hot path (an op's launch, a stream's wait, a record, a host
// wait that blocks, a callback) reads the pointer once, relaxed, and does nothing more when it
// is null: `if (Observer* o = observer()) [[unlikely]] o->on_...(...)`. Whatever an observed
// call needs only for the observer (a time, a copy of what it waits for) is made under that
// test, so an unobserved call pays for none of it.
//
// Thread-safety: the hooks are called from any thread, at once, some under a stream's submit
// lock or an event's lock: an observer takes only leaf locks and calls nothing in the runtime
// that could take another of its locks (except where a hook says so).
//
// Lifetime: the relaxed read may be stale, so a hook may reach an observer just after it was
// uninstalled. An observer is therefore never destroyed once installed (the profiler's is a
// static object that lives until the process ends); one that must stop recording at a precise
// point checks, under its own lock, whether it still records (see src/profile/recorder.cpp).
//
// Failure: the hooks are noexcept. They run where what they report is already done
// (numbered, enqueued, recorded), or where nothing may fail (a destructor, a callback thread):
// an observer out of memory leaves the entry out, it never throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/ref.hpp"

namespace eventide::detail {

class EventState;
class StreamState;
class TensorState;
class Timeline;
class Work;

// What a host thread waits for: an event, or a fence (Tensor::wait, Stream::synchronize).
struct WaitTarget {
  const EventState* event = nullptr;   // an event's wait; null for a fence's
  const Timeline* timeline = nullptr;  // a fence's wait: until `timeline` passes `seq`
  std::uint64_t seq = 0;

  static WaitTarget of_event(const EventState& e) noexcept { return {&e, nullptr, 0}; }
  static WaitTarget of_fence(const Timeline& t, std::uint64_t s) noexcept { return {nullptr, &t, s}; }
};

// How a host wait that blocked ended.
enum class WaitResult { finished, timed_out };

class Observer {
 public:
  // `work` (numbered, its dependencies collected, not yet submitted) was launched on `stream`:
  // an op that reads `reads` and writes `writes`, or a marker (work->is_marker(); no tensors).
  // Under the stream's submit lock.
  virtual void on_launch(const StreamState& stream, const Ref<Work>& work,
                         std::span<TensorState* const> reads,
                         std::span<TensorState* const> writes) noexcept = 0;
  // `work` is a wait of `stream` on `event` (Stream::wait). Under the stream's submit lock.
  virtual void on_stream_wait(const StreamState& stream, const Ref<Work>& work,
                              const EventState& event) noexcept = 0;
  // `event` was tied to `work` (null: to nothing: a tensor no op produced) by a record()
  // called at `at_ns` (host_now_ns). No lock held: the observer may ask the event for its
  // str().
  virtual void on_record(const EventState& event, const Ref<Work>& work,
                         std::int64_t at_ns) noexcept = 0;
  // The calling thread blocked on `target` from `start_ns` to `end_ns`. For an event, `ops`
  // is its pending work when the wait began; for a fence it is empty.
  virtual void on_host_wait(const WaitTarget& target, std::span<const Ref<Work>> ops,
                            std::int64_t start_ns, std::int64_t end_ns,
                            WaitResult result) noexcept = 0;
  // A wait on `target` found the work finished without blocking (it records nothing of its
  // own, but it may end a wait made of timed-out slices: a loop of short waits).
  virtual void on_wait_found_done(const WaitTarget& target) noexcept = 0;
  // A callback of `event` (null: unknown) ran on the callback thread named `thread`, from
  // `start_ns` to `end_ns`.
  virtual void on_callback(const EventState* event, std::string_view thread,
                           std::int64_t start_ns, std::int64_t end_ns) noexcept = 0;

 protected:
  // Never destroyed through this interface (see Lifetime above).
  ~Observer() = default;
};

// The installed observer (null: none). Read it through observer().
inline std::atomic<Observer*> g_observer{nullptr};

// One relaxed load: the whole cost of a hook site when nobody observes.
inline Observer* observer() noexcept { return g_observer.load(std::memory_order_relaxed); }

// Installs `o` (null: uninstalls). The caller serializes installs (the profiler does under
// its own lock) and keeps `o` alive for the rest of the process.
inline void set_observer(Observer* o) noexcept { g_observer.store(o, std::memory_order_relaxed); }

}  // namespace eventide::detail
