// Timeline: a monotonic counter of finished work, and the listeners waiting for it to pass a
// value. Every stream has one; so has every UserEvent (advanced by host code).
//
// Each piece of work enqueued on a timeline gets the next sequence number; the timeline
// publishes the highest number up to which everything has finished. A *fence* is a
// (timeline, number) pair: it has passed once `completed() >= number`. poll() is therefore a
// load and a compare.
//
// Listeners are fired exactly once, by whoever first sees the counter pass their target: the
// thread that advances it, or the one registering a listener on a fence that has already
// passed. They run on that thread with no lock of the timeline held, so they must be short
// and must not block (they unpark a thread, or re-examine an event).
//
// Thread-safety: all members, from any thread. Memory ordering: advance() releases and
// completed() acquires, so whatever the work wrote before its fence passed (its results, its
// error, its timing) is visible to a thread that sees the fence passed.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/ref.hpp"

namespace eventide::detail {

class Work;

class Listener {
 public:
  virtual ~Listener() = default;
  // Called once, with no runtime lock held; the listener is destroyed right after.
  virtual void fire() noexcept = 0;
};

class Timeline : public RefCounted {
 public:
  explicit Timeline(std::string name) : name_(std::move(name)), counter_(&own_counter_) {}

  // "cpu stream 3", "user event 7".
  const std::string& name() const noexcept { return name_; }

  std::uint64_t completed() const noexcept { return counter_->load(std::memory_order_acquire); }
  bool passed(std::uint64_t seq) const noexcept { return completed() >= seq; }

  // Publishes that everything up to `seq` has finished (no-op if not beyond the current
  // value) and fires the listeners it passes. For timelines the host advances.
  void advance(std::uint64_t seq) noexcept;

  // Fires `listener` once the timeline passes `seq`: at once, on this thread, if it already
  // has. Never call with a lock held that a listener might take.
  void listen(std::uint64_t seq, std::unique_ptr<Listener> listener);

  // Fires the listeners the counter has passed. For counters advanced outside advance()
  // (a GPU writing pinned memory): the backend's watcher calls it.
  void notify() noexcept;

  // Blocks until the device time of `work` (done, on this timeline) is known. Timelines
  // whose work knows its time when it finishes (the CPU) have nothing to wait for.
  virtual void await_timing(Work& work) { (void)work; }
  // The same for many works (done, on this timeline): a device whose times arrive in batches
  // (CUPTI) gets them all at once.
  virtual void await_timings(std::span<Work* const> works) {
    for (Work* w : works) await_timing(*w);
  }
  // A time of this timeline's work (Work::start_ns, end_ns) on the host's clock
  // (host_now_ns): the profiler puts the work of every device on one time axis. The host's
  // own timelines (the CPU, UserEvents) are on it already.
  virtual std::int64_t to_host_ns(std::int64_t device_ns) const noexcept { return device_ns; }

  // Whether a device writes the counter into memory the host reads (a GPU): a waiter can
  // then see the work end by reading it, without waiting to be woken (WaitPacer).
  bool device_written() const noexcept { return device_written_; }

  // Whether a listener is registered (the watcher of a GPU timeline watches only those).
  bool has_listeners() const noexcept {
    return min_target_.load(std::memory_order_acquire) != kNone;
  }

 protected:
  // A timeline whose counter lives elsewhere (pinned memory written by a device).
  Timeline(std::string name, std::atomic<std::uint64_t>* counter)
      : name_(std::move(name)), counter_(counter), device_written_(true) {}
  // Called after a listener is registered on a fence not yet passed.
  virtual void listener_added() noexcept {}

 private:
  static constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

  std::string name_;
  std::atomic<std::uint64_t> own_counter_{0};
  std::atomic<std::uint64_t>* counter_;
  const bool device_written_ = false;

  // Lowest target among listeners, kNone when there are none: advance() reads it to skip the
  // lock in the common case of nobody listening.
  std::atomic<std::uint64_t> min_target_{kNone};
  RuntimeMutex mu_;
  // A min-heap on the target.
  std::vector<std::pair<std::uint64_t, Listener*>> heap_;

 protected:
  ~Timeline() override;
};

}  // namespace eventide::detail
