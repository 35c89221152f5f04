// EventState: what an Event handle points to. The state machine is in eventide/event.hpp;
// this is how it is kept.
//
// An event holds the Works it is tied to that have not finished yet (`pending_`), and a
// summary of those that have (their time span and first error). poll() folds finished Works
// into the summary; when none is left pending the event is FINISHED (or FAILED).
//
// Nobody is told of that transition unless someone listens: waiters (a Parker each) and
// callbacks. While there are listeners, the event is *armed*: one Listener sits on the fence
// of one pending Work; when it fires, the event folds what has finished and re-arms on the
// next pending Work, so an event never has more than one listener registered. The listener
// holds the event: callbacks run even when every handle is gone. When the last callback is
// removed (remove_callback: a cancelled Python await) and no waiter is left, the listener is
// taken back from its timeline, so that what nobody waits for any more is freed at once.
//
// Kinds of event other than the plain one (a UserEvent's rounds, an imported event's verdict)
// plug in through an EventKind (core/event_kind.hpp), given when the state is made: the
// state machine here calls its hooks and knows nothing else of them.
//
// Where the code is: the state machine, timing and callbacks in event.cpp; waiting (spin,
// then park) in wait.cpp; the kinds in their own files (event_kind.hpp lists them).
//
// Thread-safety: every member takes `mu_`; status_ is also readable without it (poll()'s fast
// path). Lock order: a kind's own locks (a UserEvent's round lock) before mu_; mu_ is never
// held while calling into a timeline or the dispatcher: listeners may fire inline, and they
// take mu_.
//
// Memory ordering: status_ is stored with release once the tied work is folded, and poll()
// loads it with acquire; the tied work's own fences are acquire loads of release (seq_cst)
// advances. So what the work wrote is visible to whoever sees the event finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatcher.hpp"
#include "core/event_kind.hpp"
#include "core/runtime_lock.hpp"
#include "core/observer.hpp"
#include "core/parker.hpp"
#include "core/small_vector.hpp"
#include "core/work.hpp"
#include "eventide/event.hpp"

namespace eventide::detail {

class StreamState;
class NativeEvents;

class EventState : public std::enable_shared_from_this<EventState> {
 public:
  // A plain event without `kind`; else one of that kind (core/event_kind.hpp), EMPTY until
  // the kind records or restarts it.
  EventState(std::optional<Device> device, EventOptions options,
             std::unique_ptr<EventKind> kind = nullptr);
  ~EventState();

  // Ties the event to `work`, of `device` (nullopt for host work). InvalidArgument if the
  // event belongs to another device.
  // Round::fresh (a graph's replay recording an event of its capture again): an event that is
  // not pending starts afresh, in the same step (no one sees it EMPTY between), rather than
  // adding the work to what it holds; a pending one adds it.
  enum class Round { same, fresh };
  void record(Ref<Work> work, std::optional<Device> device, Round round = Round::same);
  // Ties the event to nothing on `device` (a tensor no op produced): finishes it if empty.
  void record_nothing(Device device);
  // InvalidArgument if work of `device` cannot be recorded on this event (it belongs to
  // another device): checked before a marker is placed on `stream` for it.
  void check_device(Device device, const StreamState& stream);

  // (A poll that finds the event pending demands the publication of its work: Timeline::demand.)
  // `demand` false: only looks (str()), demanding no publication.
  bool poll(bool demand = true) noexcept;
  EventStatus status() noexcept;
  // Demands the publication of the work the event is tied to (Timeline::demand); Demand::now
  // publishes on this thread, outside the event's lock.
  void demand(Demand how) noexcept;
  // Blocks until finished (true) or the deadline (false). StateError if EMPTY. Does not
  // throw the tied work's error: see error().
  bool wait_until(const Deadline& deadline);
  // Event::reset(): the kind's reset, or reset_to_empty() for a plain event.
  void reset();
  // The plain reset: StateError while pending (naming the event), else EMPTY.
  void reset_to_empty();
  // For a kind whose reset starts its next round at once (EventKind::reset), called with the
  // kind's own lock held in `kind_lock`: StateError while pending ("...: <finish_first>"),
  // else clears the event and ties it to kind().begin_round_locked()'s work alone, PENDING.
  // Lets go of `kind_lock` before it wakes waiters or hands callbacks over (also when it
  // throws), so that none of that runs under the kind's lock.
  void restart(const char* finish_first, std::unique_lock<RuntimeMutex>& kind_lock);
  // The event's kind; null for a plain event. Fixed for the state's life.
  EventKind* kind() const noexcept { return kind_.get(); }
  // Ids of callbacks, for remove_callback(): never 0, never reused within one event.
  using CallbackId = std::uint64_t;
  // Event::add_callback, returning the callback's id.
  CallbackId add_callback(Callback fn);
  // Takes back a callback that has not been handed to the dispatcher (the event has not
  // finished since it was added): true, and it never runs; the callable is destroyed on this
  // thread, with no runtime lock held. False if it has been handed over (it has run, runs, or
  // will run, exactly once) or the id is unknown: harmless from any thread, at any time.
  bool remove_callback(CallbackId id) noexcept;
  // For the Python binding's cycle collector (a callback holding its own UserEvent): calls
  // `visit(Callback&)` on each callback waiting for this UserEvent while only a UserEvent
  // handle can finish it (its set step is pending: set, fail, or the last handle going away).
  // Stops at the first non-zero result and returns it; 0 when there is nothing to visit.
  // Under the event's lock: `visit` must not run, release or add anything.
  template <class Visit>
  int visit_callbacks_held_by_handles(Visit&& visit) {
    std::lock_guard lock(mu_);
    if (!kind_ || !kind_->finished_only_by_handles()) return 0;
    for (CallbackTask* t = callbacks_.front(); t; t = t->next) {
      if (int r = visit(t->fn)) return r;
    }
    return 0;
  }
  std::exception_ptr error();
  std::optional<Device> device();
  bool timing_enabled() const noexcept { return timing_; }
  bool blocking() const noexcept { return blocking_; }
  bool interprocess() const noexcept { return interprocess_; }
  // Event::native_handle's native event: made by `events` at the first call, kept (and
  // destroyed) with the event.
  void* native_event(NativeEvents& events);
  // Device microseconds from the earliest tied start to the latest end.
  double time_elapsed_us();
  // When the last tied work ended: in its device's clock (ns), and that work if it has a
  // stamp (a GPU marker: exact differences), else null; for elapsed_time().
  struct Completion {
    std::int64_t ns = 0;
    Ref<Work> work;
  };
  Completion completion();
  std::string str() const;
  // This event's id for observers (core/observer.hpp): unique in the process, given at the
  // first call, so that an event nobody observes never takes one.
  std::uint64_t observer_id() const noexcept;

  // What a stream waiting on this event must wait for (SnapshotFor::stream_wait: the pending
  // work less what the kind hides from streams, EventKind::hidden_from_streams), or all of
  // its pending work (SnapshotFor::export_all: an export to another process).
  struct Snapshot {
    EventStatus status;
    std::vector<Ref<Work>> pending;
    std::exception_ptr error;
  };
  enum class SnapshotFor { stream_wait, export_all };
  Snapshot snapshot(SnapshotFor what = SnapshotFor::stream_wait);

  // Registers `parker` to be unparked when the event finishes; false (not registered) if it
  // has finished already.
  bool add_notifier(const Ref<Parker>& parker);
  void remove_notifier(const Parker* parker) noexcept;
  // How many times the event has finished: a waiter that sees it change was woken by a
  // completion, even if the event has been recorded again since (and is pending).
  std::uint64_t finishes() const noexcept { return finishes_.load(std::memory_order_acquire); }

  // Called by the armed listener.
  void on_armed_fence_passed() noexcept;

 private:
  struct Actions {
    CallbackList callbacks;
    std::optional<Device> device;  // whose dispatcher runs the callbacks (read under mu_)
    std::vector<Ref<Parker>> wake;
    Ref<Work> arm;
    std::uint64_t arm_count = 0;  // which arming `arm` is (arm_count_ when it was decided)
    bool expect_callbacks = false;  // a callback was added to pending work
  };
  // The event's listener, kept in the event so that arming allocates nothing: the event is
  // armed where nothing may fail (poll(), and this listener itself when it re-arms on the
  // next pending Work). An event has at most one listener registered (armed_), so one object
  // does. While registered, it holds the event.
  class ArmedListener final : public Listener {
   public:
    void hold(std::shared_ptr<EventState> event) noexcept { event_ = std::move(event); }
    void fire() noexcept override {
      // Moved out first: once on_armed_fence_passed() lets go of the event's lock, another
      // thread may register this listener again (and hold the event again).
      std::shared_ptr<EventState> event = std::move(event_);
      event->on_armed_fence_passed();
    }
    // Taken back unfired (remove_callback): lets go of the event.
    void dropped() noexcept override { std::shared_ptr<EventState> event = std::move(event_); }

   private:
    std::shared_ptr<EventState> event_;
  };
  // Runs `actions` when it goes out of scope, however the scope is left: declared before the
  // lock, it runs once the lock is let go. A call that throws after refresh_locked() (out of
  // memory, a StateError) must not lose the completion that refresh found: waiters to wake,
  // callbacks to hand over, a listener to register.
  struct RunOnExit {
    EventState& event;
    Actions& actions;
    ~RunOnExit() { event.run(actions); }
  };
  // RunOnExit that first lets go of a kind's lock (restart).
  struct UnlockThenRun {
    EventState& event;
    Actions& actions;
    std::unique_lock<RuntimeMutex>& kind_lock;
    ~UnlockThenRun() {
      if (kind_lock.owns_lock()) kind_lock.unlock();
      event.run(actions);
    }
  };

  void fold_locked(const Ref<Work>& work);
  void fold_times_locked(const Ref<Work>& work);
  // Waits for the device times not known yet (GPU work), and folds them in.
  void resolve_timing();
  // Nothing pending: FINISHED or FAILED; hands the callbacks and waiters to `actions`.
  void finish_locked(Actions& actions);
  std::string str_locked() const;
  void refresh_locked(Actions& actions);
  // Arms the event on its first pending Work: run(actions) registers the listener.
  void arm_locked(Actions& actions);
  void clear_locked();
  void run(Actions& actions) noexcept;
  // record() unobserved, and observed (kept out of the hot path).
  void record_work(Ref<Work> work, std::optional<Device> device, Round round);
  [[gnu::cold, gnu::noinline]] void record_observed(Observer& observer, Ref<Work> work, Round round,
                                                    std::optional<Device> device);
  // InvalidArgument unless this event may hold work of `device`; `what()` names the work
  // (only called to build the message). Under mu_.
  template <class What>
  void check_device_locked(Device device, const What& what) const {
    if (device_ && *device_ != device) [[unlikely]] throw_device_mismatch(device, what());
  }
  [[noreturn]] void throw_device_mismatch(Device device, const std::string& what) const;
  // wait_until once the event was found pending.
  bool wait_pending(const Deadline& deadline, std::uint64_t finished_before);
  bool finished_locked() const noexcept {
    auto s = status_.load(std::memory_order_relaxed);
    return s == EventStatus::finished || s == EventStatus::failed;
  }

  mutable RuntimeMutex mu_;
  std::atomic<EventStatus> status_{EventStatus::empty};
  std::atomic<std::uint64_t> finishes_{0};
  // One inline: an event tied to one op at a time (the common case) allocates nothing.
  SmallVector<Ref<Work>, 1> pending_;
  // Finished work whose device time is not known yet (GPU work: it arrives later).
  SmallVector<Ref<Work>, 1> untimed_;
  // Fold the known times out of untimed_ when it grows past this (at least kUntimedScanMin,
  // then twice what was left: amortized constant per record).
  static constexpr std::size_t kUntimedScanMin = 64;
  std::size_t untimed_scan_at_ = kUntimedScanMin;
  // Summary of finished tied work since the last reset, with the works that set the bounds
  // where those have stamps (GPU markers: exact differences), else null.
  std::int64_t min_start_ns_ = 0;
  std::int64_t max_end_ns_ = 0;
  std::int64_t completion_ns_ = 0;
  Ref<Work> earliest_;
  Ref<Work> latest_;
  Ref<Work> completion_work_;
  bool any_timed_ = false;
  bool any_completion_ = false;
  std::exception_ptr error_;
  std::uint32_t records_ = 0;

  const std::optional<Device> fixed_device_;
  std::optional<Device> device_;
  const bool timing_;
  const bool blocking_;
  const bool interprocess_;
  std::atomic<void*> native_event_{nullptr};  // set once (native_event())
  NativeEvents* native_events_ = nullptr;     // who destroys it; set before native_event_
  // Each in the task that takes it to the dispatcher, made by add_callback: handing them over
  // allocates nothing (CallbackTask::id is the CallbackId).
  CallbackList callbacks_;
  CallbackId next_callback_id_ = 1;
  std::vector<Ref<Parker>> notifiers_;
  bool armed_ = false;
  ArmedListener armed_listener_;  // registered while armed (see run())
  std::uint64_t arm_count_ = 0;  // armings so far: tells run() whether its arming is current
  // Where the armed listener is registered, once run() has registered it (id 0 until then,
  // and after it fired): for remove_callback() to take it back.
  Ref<Timeline> armed_timeline_;
  std::uint64_t armed_listen_id_ = 0;
  const std::unique_ptr<EventKind> kind_;  // null for a plain event
  mutable std::atomic<std::uint64_t> observer_id_{0};
};

}  // namespace eventide::detail
