// DeviceStream: the protocol of a stream whose device runs its work itself (a GPU), written
// once for every such backend. A backend's stream derives from it and implements the native
// interface below: launch a body, place a marker, publish the end of a work, wait on the
// device for another stream's work, and say what it finds in flight.
//
// What the engine does with a Work it is given (StreamState::submit, in sequence order):
//
// * Held: a Work that depends on host-side work not finished yet (a UserEvent, an op of the
//   CPU, GPU work still held itself, or work the device cannot wait for) stays on the host,
//   with every Work submitted after it, and is launched, in order, once that work has
//   finished: a listener on its fence sets release_due and wakes the watcher, whose turn
//   calls release_if_due(). A wait on the device for a word the host sets later would be
//   quicker, but while a stream waits on the device anything that synchronizes the device
//   waits too (CUDA's lazy loading of a kernel did, and hung): held work blocks nothing.
// * Launched (launch, under the launch lock, in order): ordered on the device after what it
//   depends on there, failed at once where a dependency is known to have failed (it then runs
//   nothing, unless it must be issued all the same: a collective), else its body or marker
//   goes to the device, followed by the publication of its end. Whether a dependency that is
//   still running fails is known only later: the error is decided when first read
//   (Work::decide_error_later). Then it is in flight.
// * Published (publish_through): the timeline shows a Work finished once the device has
//   written its number into the counter. Where the backend allows it (can_publish_later), a
//   launch leaves that write for later, so that a burst of Works is published once, after its
//   last, instead of after each (the write costs about as much host time as a tiny kernel's
//   launch): the publication is made by the next launch at least every kPublishEvery Works, by
//   the watcher once the stream has had no launch for kQuietBeforePublish, and at once for
//   whoever looks for one of the Works (Timeline::demand, through DeviceTimeline): a host
//   wait and another stream's wait on the device publish on their own thread before they
//   wait (so the device never waits for the host to publish: a launch that stalls behind a
//   device-wide synchronization cannot deadlock it), a listener or a poll has the watcher do
//   it at its next turn.
// * Retired (retire(), the watcher's turn): in-flight Works the timeline shows finished leave
//   the list oldest first; their deferred errors are decided, the backend takes their timing,
//   and what they held (memory, the body) is released.
// * Abandoned (abandon(), the device lost): everything held and in flight fails with the
//   device's error, and the timeline passes it.
//
// The engine's state and locks: the launch lock (launch_mu_) orders launches (submit's direct
// ones and the watcher's releases) and guards the held list; the publication lock
// (publish_mu_) orders the counter's writes, and is a leaf: nothing is locked under it, and
// any thread may take it while holding a launch lock (its own stream's); the in-flight lock
// guards the in-flight list. None is held while calling out to users' objects. The lists are linked
// through the Works (WorkList): submit, launch and retire allocate nothing that could fail,
// but a release listener (when one cannot be had, the watcher looks at the held work on each
// of its turns).
//
// Thread-safety: every member, from any thread; the native interface's calls are made under
// the launch lock (launch side) or from the watcher's turn (retire side), as each says.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>

#include "core/runtime_lock.hpp"
#include "core/spin_lock.hpp"
#include "core/stream_state.hpp"
#include "core/work_list.hpp"

namespace eventide::detail {

class DeviceStream;

// The device a DeviceStream belongs to, as the engine sees it: its failure and its watcher.
class DeviceEngine {
 public:
  virtual ~DeviceEngine() = default;
  // The device's failure as a whole (a GPU's sticky error), else null. Sticky.
  virtual std::exception_ptr broken() const noexcept = 0;
  // The device has failed with `error` (the first one stays): everything in flight and held
  // on its streams fails (their abandon()), and later work fails at once.
  virtual void mark_broken(std::exception_ptr error) noexcept = 0;
  // Something for the watcher to look at soon: new work in flight, held work due, a listener.
  virtual void wake() noexcept = 0;
  // New work in flight on a stream the watcher has on its list already: a wake only where the
  // watcher may be asleep (one that turns sees the launch itself).
  virtual void nudge() noexcept { wake(); }
  // Someone looks for a fence (Timeline::demand): the watcher looks soon, without taking it
  // for progress (a poll loop would otherwise keep it from ever checking the device's health).
  virtual void demanded() noexcept { wake(); }
  // Puts `stream` (work in flight or held) on the watcher's list. Allocates nothing.
  virtual void watch(std::shared_ptr<DeviceStream> stream) noexcept = 0;
};

// The timeline of a DeviceStream: a counter the device writes, whose publication may be late
// (see "Published" above). demand() reaches the stream, which the timeline may outlive.
//
// Thread-safety: all members, from any thread.
class DeviceTimeline : public Timeline {
 protected:
  DeviceTimeline(std::string name, std::atomic<std::uint64_t>* counter, DeviceEngine& engine)
      : Timeline(std::move(name), counter), engine_(engine) {}

  // Demand::now publishes on this thread through the stream, if it is still there (a Work not
  // launched yet is published by its launch, which sees the demand). The watcher is told of
  // a fence demanded for the first time (a poll loop tells it once).
  void demanded(std::uint64_t seq, Demand how) noexcept override;
  // A listener is a demand too; the watcher then watches closely until it has fired.
  void listener_added(std::uint64_t seq) noexcept override;

 private:
  friend class DeviceStream;

  DeviceEngine& engine_;
  // The highest fence demanded so far (relaxed: launches and the watcher's turns read it
  // under publish_mu_ or act on it at their next look).
  std::atomic<std::uint64_t> demanded_{0};
  // The stream that publishes this timeline's counter, from its first submit on.
  SpinLock stream_mu_;
  std::weak_ptr<DeviceStream> stream_;
};

class DeviceStream : public StreamState {
 public:
  // At least every this many Works launched one after the other, the launch publishes.
  static constexpr std::uint64_t kPublishEvery = 16;
  // How long a stream goes without a launch before the watcher publishes what it left
  // unpublished: longer than the host takes between the ops of a burst, short beside a wait.
  static constexpr std::chrono::microseconds kQuietBeforePublish{20};

  ~DeviceStream() override;

  // --- For the watcher's turn ---
  // Launches held work whose host-side dependencies have finished.
  void release_if_due() noexcept;
  // Retires what has finished; true if work is still in flight or held.
  bool retire() noexcept;
  // Publishes what was launched and left unpublished once it is due (demanded, or the stream
  // has been quiet for kQuietBeforePublish by `now`), and reports a publication that failed
  // on another thread (the device is then lost). The watcher's turn alone.
  void publish_if_due(std::chrono::steady_clock::time_point now) noexcept;
  // Fails everything in flight and held with `error` and passes the timeline beyond it (the
  // device is lost).
  void abandon(const std::exception_ptr& error) noexcept;
  // How many Works are held on the host now.
  std::size_t held_count() const noexcept { return held_count_.load(std::memory_order_acquire); }
  // Whether a Work was launched since the watcher's last look (it notes each look).
  bool launched_since_look() noexcept {
    const std::uint64_t launched = launched_through_.load(std::memory_order_seq_cst);
    return std::exchange(looked_launched_, launched) != launched;
  }

 protected:
  // `timeline`: the device publishes each Work's end into its counter.
  DeviceStream(Device device, std::uint64_t id, Ref<DeviceTimeline> timeline, DeviceEngine& engine);

  void submit(Ref<Work> work) noexcept final;

  // --- The native interface: what a backend's stream implements ---
  // Launch side: called under the launch lock, in sequence order; each may throw (the Work
  // fails with what it threw), publish excepted, whose failure loses the device.

  // The first dependency of `work` that the device cannot wait for (host-side work not
  // finished, device work not launched yet or that this stream cannot wait on: see
  // can_wait_on_device), else null. A backend may hold more (work it cannot launch yet).
  virtual const Dep* host_wait(const Work& work) noexcept;
  // Whether this stream can wait on the device for `producer`: launched, unfinished work on
  // another device-written timeline (of this device or another).
  virtual bool can_wait_on_device(const Work& producer) noexcept = 0;
  // Orders what this stream launches next after `producer` on the device (can_wait_on_device
  // said it can).
  virtual void wait_on_device(const Work& producer) = 0;
  // Whether that wait reads the producer's publication (its stream's counter): the engine then
  // has it published first. False where it waits on something of the producer's own (an event
  // recorded at a marker's point), which needs no publication.
  virtual bool device_wait_reads_publication(const Work& producer) noexcept {
    (void)producer;
    return true;
  }
  // Around the steps of one launch (a device made current on the thread, say).
  virtual void begin_launch() {}
  virtual void end_launch() noexcept {}
  // Sends `work`'s body to the device (its kernels, timed as the backend times them).
  virtual void launch_body(Work& work) = 0;
  // Places a timed marker (Work::is_marker, timing on) in the device's stream: its stamp.
  virtual void launch_marker(Work& work) = 0;
  // The device's part of the end of `work`, after its body or marker and before its
  // publication, for each Work (an event recorded after it; a fake device's time). Throws if
  // it cannot: the device is then taken for lost.
  virtual void end_work(Work& work) { (void)work; }
  // Whether the counter's write may be left for later and made from any thread, for many
  // Works at once (see "Published" above). Asked at each launch, under publish_mu_.
  virtual bool can_publish_later() const noexcept { return false; }
  // Publishes the end of every Work launched through `seq`: the timeline shows them finished
  // once the device has run them. Under publish_mu_: from the launch (for each Work, where the
  // backend cannot publish later), else from any thread, with no device made current by
  // begin_launch. Throws if it cannot: the device is then taken for lost.
  virtual void publish_through(std::uint64_t seq) = 0;
  // Where work may not be held (it would be launched by another thread, and that is not
  // allowed here): the error `work` fails with for waiting on `dep`; null where it may be.
  virtual std::exception_ptr unholdable(const Work& work, const Dep& dep) noexcept;

  // Retire side: called from retire() (the watcher's turn).

  // Whether the device writes the counter itself: then nothing in flight has finished while
  // the counter is below the oldest in-flight Work, and retire() looks without a lock.
  virtual bool device_writes_counter() const noexcept { return true; }
  // The sequence number through which the in-flight Works (oldest first) have finished, given
  // the counter's `completed`. Under the in-flight lock; allocates nothing.
  virtual std::uint64_t finished_through(std::uint64_t completed, const WorkList& inflight) noexcept;
  // The Works through `seq` have finished (a backend that advances the counter itself does it
  // here).
  virtual void reached(std::uint64_t seq) noexcept;
  // `work` has finished and leaves the stream: its timing is the backend's to take, and what
  // end_work() took for it goes back. Its execution state is released after this.
  virtual void retired(Work& work) noexcept;
  // Abandon side: what the device still holds of this stream's work is dropped (a fake
  // device's queue). Under no engine lock.
  virtual void drop_native_work() noexcept {}

  DeviceEngine& engine() const noexcept { return engine_; }
  // Publishes everything launched so far: for a backend whose can_publish_later() has just
  // turned false (the native stream was handed out), after which nothing is left for later.
  // From any thread, also from a body (under the launch lock). A failure is left for the
  // watcher to report.
  void publish_now() noexcept;

 private:
  friend class ReleaseListener;
  friend class DeviceTimeline;

  DeviceTimeline& device_timeline() const noexcept { return static_cast<DeviceTimeline&>(timeline()); }
  // After `work`'s launch (under launch_mu_): its end in the device's queue, and published now
  // or left for later. Throws if the device cannot take them.
  void end_and_publish(Work& work);
  // Publishes what was launched, if `seq` is not published yet (Demand::now); a failure is left
  // for the watcher to report (the caller may hold a launch lock, which the device's loss takes).
  void publish_for(std::uint64_t seq) noexcept;
  // Under publish_mu_: publishes everything launched. Throws as publish_through does.
  void publish_launched_locked();

  // Has the watcher release held work when the host-side work the first held Work waits for
  // finishes. Under launch_mu_.
  void hold_until_ready() noexcept;
  // Launches `work` on the device after what it depends on there. Under launch_mu_. Returns
  // the device's failure if the launch found one (the caller reports it once unlocked).
  std::exception_ptr launch_locked(Ref<Work> work) noexcept;
  // Orders this stream after `dep` on the device; sets `decided_later` if its failure can
  // only be known once it has finished.
  void order_after(const Dep& dep, bool& decided_later);
  // Puts the stream on the watcher's list if it was not (the caller set watched_ under
  // inflight_mu_), else nudges the watcher.
  void ensure_watched() noexcept;
  void watch_or_wake(bool newly_watched) noexcept;

  DeviceEngine& engine_;

  // Launches are serialized (submit's direct ones and the watcher's releases) in seq order.
  RuntimeMutex launch_mu_;
  WorkList held_;
  std::atomic<std::size_t> held_count_{0};
  std::atomic<bool> release_due_{false};
  std::uint64_t last_seq_ = 0;  // the last Work submitted (held or launched)

  bool attached_ = false;  // the timeline knows this stream (DeviceTimeline::stream_); under launch_mu_

  RuntimeMutex publish_mu_;
  // The last Work whose device part is in the device's queue, and the last whose publication
  // is (written under publish_mu_; read without it to see whether anything is left).
  std::atomic<std::uint64_t> launched_through_{0};
  std::atomic<std::uint64_t> published_through_{0};
  // A publication made for someone else that failed (their thread could not report it): the
  // watcher's next turn reports the device lost. Under publish_mu_.
  std::exception_ptr publish_failed_;
  std::atomic<bool> has_publish_failed_{false};
  // The watcher's look at how long the stream has been quiet, and at what was launched (its
  // thread alone).
  std::uint64_t quiet_launched_ = 0;
  std::uint64_t looked_launched_ = 0;
  std::chrono::steady_clock::time_point quiet_since_{};

  RuntimeMutex inflight_mu_;
  WorkList inflight_;
  // The sequence number of the oldest Work in flight (kNoneInFlight: none), for retire()'s
  // look without the lock. Written under inflight_mu_.
  static constexpr std::uint64_t kNoneInFlight = ~std::uint64_t{0};
  std::atomic<std::uint64_t> oldest_inflight_{kNoneInFlight};
  bool watched_ = false;  // the watcher has this stream on its list (under inflight_mu_)
};

}  // namespace eventide::detail
