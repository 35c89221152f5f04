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
// Out of memory: registering, firing and taking back a listener allocate nothing (the heap
// is linked through the listeners themselves), so the runtime's code that may not fail (a
// worker waiting for a dependency, an event arming itself from poll() or from its listener)
// can always register one; a listener its owner keeps (listen(seq, Listener&)) needs no
// allocation at all.
//
// Thread-safety: all members, from any thread. Memory ordering: advance() releases and
// completed() acquires, so whatever the work wrote before its fence passed (its results, its
// error, its timing) is visible to a thread that sees the fence passed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/parker.hpp"
#include "core/runtime_lock.hpp"
#include "core/ref.hpp"

namespace eventide::detail {

class Work;

// How soon someone looking for a fence wants a device that publishes its progress late
// (Timeline::demand) to publish it.
enum class Demand {
  // By the device's watcher, at its next turn: from anywhere, under any lock (a listener
  // registered, a poll that found the work unfinished).
  soon,
  // On the calling thread, before demand() returns: the publication is then in the device's
  // queue. For callers that hold no lock of the engine's but their own stream's launch lock
  // (a host wait, a launch that waits for the work on the device).
  now,
};

class Listener {
 public:
  Listener() noexcept = default;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  virtual ~Listener() = default;
  // Called once, with no runtime lock held. The timeline does not touch the listener once
  // fire() has begun: fire() may register it again, or end it or its owner.
  virtual void fire() noexcept = 0;
  // Called instead of fire(), with no runtime lock held, when the listener is taken back
  // (unlisten) or its timeline is destroyed unfired: it lets go of what it held.
  virtual void dropped() noexcept {}

 private:
  friend class Timeline;
  // The timeline's links, valid while registered: a pairing heap on target_ (child_,
  // sibling_, and prev_: the parent for a first child, else the left sibling), and the list
  // of every registered listener (all_prev_, all_next_), which unlisten() scans for an id.
  std::uint64_t target_ = 0;
  std::uint64_t id_ = 0;
  Listener* child_ = nullptr;
  Listener* sibling_ = nullptr;
  Listener* prev_ = nullptr;
  Listener* all_prev_ = nullptr;
  Listener* all_next_ = nullptr;
};

// A listener made for one registration (a parker to unpark, a held stream to release), which
// nothing else could own: handed to the timeline as a unique_ptr, it owns itself from then
// on, and ends itself once it has fired (after run()) or been dropped. The timeline never
// deletes a listener: whether one outlives its firing is its type's business.
class OneShotListener : public Listener {
 public:
  void fire() noexcept final {
    run();
    delete this;
  }
  void dropped() noexcept final { delete this; }

 protected:
  // What firing does.
  virtual void run() noexcept = 0;
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
  // has. Never call with a lock held that a listener might take. Returns an id for unlisten():
  // 0 if the fence had passed (the listener fired at once); the id of a listener that has
  // fired since is stale (unlisten() returns false). Allocates nothing.
  std::uint64_t listen(std::uint64_t seq, std::unique_ptr<OneShotListener> listener) noexcept;
  // The same for a listener its owner keeps alive until it has fired or been dropped (one
  // embedded in the object it acts on: registering it needs no memory at all). It must not
  // be registered twice at once.
  std::uint64_t listen(std::uint64_t seq, Listener& listener) noexcept;

  // Unparks `parker` once the timeline passes `seq` (at once if it has). False if no listener
  // could be allocated for it (out of memory): nothing will unpark it then, so the waiter
  // looks at the timeline itself between naps of at most kUnheardNap.
  bool unpark_when_passed(std::uint64_t seq, const Ref<Parker>& parker) noexcept;
  static constexpr std::chrono::milliseconds kUnheardNap{1};

  // Takes back the listener that listen() registered under `id`, unfired, and calls its
  // dropped() (a OneShotListener ends itself there), with no lock of the timeline held: true.
  // False if it has fired or is firing (it then runs to the end), or for id 0. Ids are never
  // reused, so a stale one takes nothing back. Costs a scan of the listeners. Never call with
  // a lock held that the listener's destructor might take.
  bool unlisten(std::uint64_t id) noexcept;

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

  // Someone looks for `seq` to pass. A device may publish its progress late (a GPU stream
  // writes its counter after a burst of work, not after every op: DeviceStream), so whoever
  // waits for a fence, or listens for it, or polls it and finds it unfinished, says so here,
  // and the device publishes it `how` soon. Nothing for the host's own timelines, or once
  // passed. Whoever only polls is not left waiting for ever without it: a device's watcher
  // publishes what a quiet stream left unpublished within microseconds.
  void demand(std::uint64_t seq, Demand how) noexcept {
    if (device_written_ && !passed(seq)) demanded(seq, how);
  }

  // Whether a listener is registered (the watcher of a GPU timeline watches only those).
  bool has_listeners() const noexcept {
    return min_target_.load(std::memory_order_acquire) != kNone;
  }

 protected:
  // A timeline whose counter lives elsewhere (pinned memory written by a device).
  Timeline(std::string name, std::atomic<std::uint64_t>* counter)
      : name_(std::move(name)), counter_(counter), device_written_(true) {}
  // What demand() asks of a device-written timeline (DeviceTimeline: core/device_stream.hpp).
  virtual void demanded(std::uint64_t seq, Demand how) noexcept {
    (void)seq;
    (void)how;
  }
  // Called after a listener is registered on `seq`, not yet passed.
  virtual void listener_added(std::uint64_t seq) noexcept { (void)seq; }

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
  // A min-heap on the target (a pairing heap), and the list of all registered listeners,
  // both linked through the listeners: see Listener.
  Listener* heap_ = nullptr;
  Listener* all_ = nullptr;
  std::uint64_t next_id_ = 1;

  std::uint64_t insert(std::uint64_t seq, Listener* listener) noexcept;
  // Under mu_.
  void link_locked(std::uint64_t seq, Listener* listener) noexcept;
  Listener* pop_locked() noexcept;
  void remove_locked(Listener* listener) noexcept;
  static Listener* meld(Listener* a, Listener* b) noexcept;
  static Listener* merge_pairs(Listener* first) noexcept;
  // Destroys (owned) or drops (kept by its owner) a listener that will not fire.
  static void discard(Listener* listener) noexcept;

 protected:
  ~Timeline() override;
};

}  // namespace eventide::detail
