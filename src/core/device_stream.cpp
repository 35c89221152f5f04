// The device-stream engine (device_stream.hpp).
#include "core/device_stream.hpp"

#include <limits>
#include <new>
#include <optional>
#include <utility>

namespace eventide::detail {

namespace {

// Raises `word` to `seq`; whether it was below.
bool raise(std::atomic<std::uint64_t>& word, std::uint64_t seq) noexcept {
  std::uint64_t before = word.load(std::memory_order_relaxed);
  while (before < seq) {
    if (word.compare_exchange_weak(before, seq, std::memory_order_relaxed)) return true;
  }
  return false;
}

}  // namespace

void DeviceTimeline::demanded(std::uint64_t seq, Demand how) noexcept {
  const bool first = raise(demanded_, seq);
  if (how == Demand::now) {
    std::shared_ptr<DeviceStream> stream;
    {
      std::lock_guard lock(stream_mu_);
      stream = stream_.lock();
    }
    if (stream) stream->publish_for(seq);
  }
  if (first) engine_.demanded();
}

void DeviceTimeline::listener_added(std::uint64_t seq) noexcept {
  raise(demanded_, seq);
  engine_.wake();
}

DeviceStream::DeviceStream(Device device, std::uint64_t id, Ref<DeviceTimeline> timeline, DeviceEngine& engine)
    : StreamState(device, id, std::move(timeline)), engine_(engine) {}

// The watcher holds the stream while work is in flight or held: nothing is left here.
DeviceStream::~DeviceStream() = default;

// Fires when the host-side work the first held Work waits for has finished: the watcher
// launches what can go.
class ReleaseListener final : public OneShotListener {
 public:
  explicit ReleaseListener(std::shared_ptr<DeviceStream> s) : stream_(std::move(s)) {}

 private:
  void run() noexcept override {
    stream_->release_due_.store(true, std::memory_order_release);
    stream_->engine_.wake();
  }

  std::shared_ptr<DeviceStream> stream_;
};

const Dep* DeviceStream::host_wait(const Work& work) noexcept {
  for (const Dep& dep : work.deps()) {
    const Work& w = *dep.work;
    // (This stream's own first: done() reads the device-written counter, a cache miss.)
    if (&w.timeline() == &timeline() || w.done()) continue;
    if (!w.timeline().device_written()) return &dep;  // the host's work, still running
    // Device work still held on its host is host-side work: a device wait for it would stall
    // this stream until the host launches it, and anything synchronizing the device
    // meanwhile would deadlock.
    if (!w.launched()) return &dep;
    if (!can_wait_on_device(w)) return &dep;
  }
  return nullptr;
}

std::exception_ptr DeviceStream::unholdable(const Work&, const Dep&) noexcept { return nullptr; }

std::uint64_t DeviceStream::finished_through(std::uint64_t completed, const WorkList&) noexcept {
  return completed;
}

void DeviceStream::reached(std::uint64_t) noexcept {}

void DeviceStream::retired(Work&) noexcept {}

void DeviceStream::order_after(const Dep& dep, bool& decided_later) {
  Work& w = *dep.work;
  if (w.done()) return;
  // Whether it failed is known only once it has finished: this Work's error is decided then.
  if (dep.kind != DepKind::order) decided_later = true;
  if (&w.timeline() == &timeline()) return;  // before it on this stream: ordered already
  // Its end must be in its device's queue before this stream waits for it there (the device
  // must never wait for the host to publish).
  if (device_wait_reads_publication(w)) w.timeline().demand(w.seq(), Demand::now);
  wait_on_device(w);  // host-side deps are done (the Work was held until they were)
}

void DeviceStream::ensure_watched() noexcept {
  bool newly;
  {
    std::lock_guard lock(inflight_mu_);
    newly = !std::exchange(watched_, true);
  }
  watch_or_wake(newly);
}

void DeviceStream::watch_or_wake(bool newly_watched) noexcept {
  if (newly_watched) {
    engine_.watch(std::static_pointer_cast<DeviceStream>(shared_from_this()));
  } else {
    engine_.nudge();
  }
}

void DeviceStream::hold_until_ready() noexcept {
  const Dep* dep = host_wait(*held_.front());
  if (!dep) {  // finished meanwhile
    release_due_.store(true, std::memory_order_release);
    engine_.wake();
    return;
  }
  // Fires at once if it finishes meanwhile; it only sets a flag, so it may run under our lock.
  // Owned from here on: by the timeline once registered, which destroys it after it fires.
  std::unique_ptr<OneShotListener> listener(
      new (std::nothrow) ReleaseListener(std::static_pointer_cast<DeviceStream>(shared_from_this())));
  if (!listener) {
    // Out of memory for the listener: the watcher looks at the held work on each turn
    // instead (release_if_due finds it still waiting and comes back here).
    release_due_.store(true, std::memory_order_release);
    engine_.wake();
    return;
  }
  dep->work->timeline().listen(dep->work->seq(), std::move(listener));
}

void DeviceStream::submit(Ref<Work> work) noexcept {
  std::exception_ptr lost;
  {
    std::lock_guard lock(launch_mu_);
    if (!attached_) [[unlikely]] {
      DeviceTimeline& t = device_timeline();
      std::lock_guard attach(t.stream_mu_);
      t.stream_ = std::static_pointer_cast<DeviceStream>(shared_from_this());
      attached_ = true;
    }
    last_seq_ = work->seq();
    const Dep* waits = nullptr;  // what it must be held for (behind held work: held anyway)
    if (held_.empty() && !work->error() && !engine_.broken()) {
      waits = host_wait(*work);
      if (waits) {
        // A Work that may not be held fails instead: then it is launched at once, and only
        // has to finish in order.
        if (std::exception_ptr refused = unholdable(*work, *waits)) {
          work->set_error(std::move(refused));
          waits = nullptr;
        }
      }
    }
    if (!held_.empty() || waits) {
      held_.push_back(std::move(work));  // (not launched: set_launched when it is)
      held_count_.store(held_.size(), std::memory_order_release);
      if (held_.size() == 1) hold_until_ready();
      ensure_watched();
      return;
    }
    lost = launch_locked(std::move(work));
  }
  if (lost) engine_.mark_broken(lost);
}

void DeviceStream::release_if_due() noexcept {
  // A load first: the watcher calls this on every turn, and a write each time would take the
  // cache line from the launching thread, which writes beside it on every launch.
  if (!release_due_.load(std::memory_order_relaxed)) return;
  if (!release_due_.exchange(false, std::memory_order_acq_rel)) return;
  std::exception_ptr lost;
  {
    std::lock_guard lock(launch_mu_);
    while (!held_.empty() && !lost) {
      if (!engine_.broken() && host_wait(*held_.front())) {
        hold_until_ready();
        break;
      }
      Ref<Work> w = held_.pop_front();
      held_count_.store(held_.size(), std::memory_order_release);
      lost = launch_locked(std::move(w));
    }
  }
  if (lost) engine_.mark_broken(lost);
}

std::exception_ptr DeviceStream::launch_locked(Ref<Work> work) noexcept {
  bool decided_later = false;
  auto fail = [&](std::exception_ptr e) {
    if (!work->error()) work->set_error(std::move(e));
  };
  std::exception_ptr lost = engine_.broken();
  if (lost) {
    // Nothing runs on this device any more: the Work fails here, in order (what was before it
    // has been failed and passed by the device's abandon).
    fail(lost);
    work->release_execution_state();
    work->set_launched();
    timeline().advance(work->seq());
    return nullptr;
  }
  bool began = false;
  try {
    begin_launch();
    began = true;
    // A Work that failed already runs nothing (unless it must be issued all the same: a
    // collective): it needs no ordering but its stream's. (Only where all it depends on is on
    // the device already: a Work that had to be held but could not has failed.)
    const bool must_issue = work->must_issue() && !host_wait(*work);
    if (!work->error() || must_issue) {
      for (const Dep& dep : work->deps()) order_after(dep, decided_later);
    }
    // Failures known now: the Work is not launched at all (a collective is, and fails). Known
    // are those of finished work and of work that failed at its launch, such as a wait for a
    // failed event just before this Work on its stream: it ran nothing, and its error is final
    // before the device has passed it (what this Work would run after it must not run: a host
    // body's side effects, a kernel over inputs that were never written).
    for (const Dep& dep : work->deps()) {
      const Work& w = *dep.work;
      if (dep.kind != DepKind::order && (w.done() || w.failed_at_launch()) && w.error()) {
        fail(dependency_error(*work, dep));
        break;
      }
    }
    if ((!work->error() || must_issue) && work->body()) {
      launch_body(*work);
    } else if (!work->error() && work->kind() == WorkKind::marker) {
      // In the device's stream itself, after whatever any code enqueued there before it.
      launch_marker(*work);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  try {
    end_and_publish(*work);
  } catch (...) {
    // Without the publication of its end the timeline cannot move: the device is in trouble.
    lost = std::current_exception();
    fail(lost);
  }
  if (began) end_launch();
  if (decided_later && !work->error()) work->decide_error_later();
  // Its launch has ended, its device work and the publication are in the stream: other
  // streams may wait for it on the device from now on (Work::launched).
  work->set_launched();
  bool newly_watched;
  {
    std::lock_guard lock(inflight_mu_);
    if (inflight_.empty()) oldest_inflight_.store(work->seq(), std::memory_order_release);
    inflight_.push_back(std::move(work));  // linked through the Work: no allocation
    newly_watched = !std::exchange(watched_, true);
  }
  watch_or_wake(newly_watched);
  return lost;
}

void DeviceStream::end_and_publish(Work& work) {
  end_work(work);
  std::lock_guard lock(publish_mu_);
  const std::uint64_t seq = work.seq();
  launched_through_.store(seq, std::memory_order_release);
  const std::uint64_t published = published_through_.load(std::memory_order_relaxed);
  if (can_publish_later() && seq - published < kPublishEvery &&
      device_timeline().demanded_.load(std::memory_order_relaxed) <= published) {
    return;  // left for later: the next launch, the watcher, or whoever looks for it
  }
  publish_through(seq);
  published_through_.store(seq, std::memory_order_release);
}

void DeviceStream::publish_launched_locked() {
  const std::uint64_t launched = launched_through_.load(std::memory_order_relaxed);
  if (published_through_.load(std::memory_order_relaxed) >= launched) return;
  publish_through(launched);
  published_through_.store(launched, std::memory_order_release);
}

void DeviceStream::publish_for(std::uint64_t seq) noexcept {
  if (published_through_.load(std::memory_order_acquire) >= seq) return;
  std::lock_guard lock(publish_mu_);
  if (published_through_.load(std::memory_order_relaxed) >= seq) return;
  try {
    publish_launched_locked();
  } catch (...) {
    if (!publish_failed_) publish_failed_ = std::current_exception();
    has_publish_failed_.store(true, std::memory_order_release);
  }
}

void DeviceStream::publish_now() noexcept {
  // (No launch lock: this may be called from a body, under it. A launch asks
  // can_publish_later() under publish_mu_: one that asks after this sees the new answer, and
  // what one before it left is published here.)
  publish_for(std::numeric_limits<std::uint64_t>::max());
}

void DeviceStream::publish_if_due(std::chrono::steady_clock::time_point now) noexcept {
  std::exception_ptr lost;
  if (has_publish_failed_.load(std::memory_order_acquire)) [[unlikely]] {
    std::lock_guard lock(publish_mu_);
    lost = std::exchange(publish_failed_, nullptr);
    has_publish_failed_.store(false, std::memory_order_relaxed);
  }
  const std::uint64_t launched = launched_through_.load(std::memory_order_acquire);
  const std::uint64_t published = published_through_.load(std::memory_order_acquire);
  if (!lost && launched > published) {
    if (launched != quiet_launched_) {  // launched since the last look: quiet from now on
      quiet_launched_ = launched;
      quiet_since_ = now;
    }
    if (device_timeline().demanded_.load(std::memory_order_relaxed) > published ||
        now - quiet_since_ >= kQuietBeforePublish) {
      std::lock_guard lock(publish_mu_);
      try {
        publish_launched_locked();
      } catch (...) {
        lost = std::current_exception();
      }
    }
  }
  if (lost) engine_.mark_broken(lost);
}

bool DeviceStream::retire() noexcept {
  const std::uint64_t done = timeline().completed();
  const std::uint64_t oldest = oldest_inflight_.load(std::memory_order_acquire);
  if (device_writes_counter() && oldest != kNoneInFlight && done < oldest) {
    // Nothing has finished since the last turn: no lock (the watcher calls this on every turn
    // of its loop, and launches take the same lock: a watcher taking it in a tight loop made
    // launches queue behind it for tens of microseconds).
    timeline().notify();
    return true;
  }
  WorkList finished;  // linked through the Works: no allocation (this is the watcher's loop)
  std::uint64_t last_finished = 0;
  bool more;
  {
    std::lock_guard lock(inflight_mu_);
    const std::uint64_t through = finished_through(done, inflight_);
    while (!inflight_.empty() && inflight_.front()->seq() <= through) {
      last_finished = inflight_.front()->seq();
      finished.push_back(inflight_.pop_front());
    }
    oldest_inflight_.store(inflight_.empty() ? kNoneInFlight : inflight_.front()->seq(),
                           std::memory_order_release);
    more = !inflight_.empty() || held_count_.load(std::memory_order_acquire) > 0;
    if (!more) watched_ = false;
  }
  if (!finished.empty()) reached(last_finished);
  timeline().notify();
  while (Ref<Work> w = finished.pop_front()) {
    (void)w->error();  // decides an error left for later while the deps are still there
    retired(*w);
    w->release_execution_state();  // the Work's references to memory go here
  }
  return more;
}

void DeviceStream::abandon(const std::exception_ptr& error) noexcept {
  std::uint64_t last;
  WorkList held;
  {
    std::lock_guard lock(launch_mu_);
    held.swap(held_);
    held_count_.store(0, std::memory_order_release);
    last = last_seq_;
  }
  for (Work* w = held.front(); w; w = w->next) {
    if (!w->error()) w->set_error(error);
  }
  {
    std::lock_guard lock(inflight_mu_);
    for (Work* w = inflight_.front(); w; w = w->next) {
      if (!w->done() && !w->error()) w->set_error(error);
    }
  }
  drop_native_work();
  timeline().advance(last);
  retire();
  while (Ref<Work> w = held.pop_front()) w->release_execution_state();
}

}  // namespace eventide::detail
