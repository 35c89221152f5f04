// The profiler: the Recorder (the core's observer while a profiler runs), ProfilerState
// (profile/recorder.hpp), HostWaitScope, Profiler and Profile::str. The exporters
// (chrome_trace, timeline_html) are beside it.
#include "profile/recorder.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/event_state.hpp"
#include "core/nvtx.hpp"
#include "core/observer.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "core/wait.hpp"
#include "eventide/errors.hpp"
#include "profile/layout.hpp"

namespace eventide {
namespace detail {

namespace {

// How far apart two timed-out waits of one thread on one event may be to be one wait: a
// waiter that waits in slices (Python's Event.wait, interruptible by Ctrl-C) is one wait.
constexpr std::int64_t kWaitSliceGapNs = 2'000'000;
// How many of the latest host waits a wait that found its work done looks through for the
// calling thread's last one (the slice it may end): the other threads' waits in between.
constexpr int kFoundDoneLookBack = 64;
// The slices stop() waits in when it is to call someone between them (an interrupt check).
constexpr auto kStopSlice = std::chrono::milliseconds(20);

// The calling thread's open HostWaitScope (null: none).
thread_local HostWaitScope* t_wait_scope = nullptr;

// "f32[512, 512], f32[512, 512] -> f32[512, 512]"; empty if there is no memory for it.
std::string describe_tensors(std::span<TensorState* const> reads,
                             std::span<TensorState* const> writes) noexcept {
  try {
    auto list = [](std::span<TensorState* const> ts) {
      std::string out;
      for (std::size_t i = 0; i < ts.size(); ++i) {
        if (i) out += ", ";
        out += name(ts[i]->dtype);
        out += to_string(ts[i]->shape);
      }
      return out;
    };
    std::string in = list(reads);
    std::string out = list(writes);
    if (out.empty()) return in;
    return in.empty() ? "-> " + out : in + " -> " + out;
  } catch (...) {
    return {};  // out of memory: the op is profiled without it
  }
}

}  // namespace

// The core's observer while a profiler runs: each hook takes the lock, finds the running
// ProfilerState (if any is still running: the core's read of the observer may be stale) and
// appends to it, counting what it cannot append. Never destroyed (see recorder.hpp).
class Recorder final : public Observer {
 public:
  static Recorder& get() noexcept;
  constexpr Recorder() = default;

  // Guards `current` and everything a running ProfilerState records.
  RuntimeMutex mu;
  // The running profiler's state (null: none). Changed under mu; also read relaxed without it
  // (recording()), for HostWaitScope's one load.
  std::atomic<ProfilerState*> current{nullptr};

  bool recording() const noexcept { return current.load(std::memory_order_relaxed) != nullptr; }

  // Under mu.
  void install(ProfilerState* state) noexcept {
    current.store(state, std::memory_order_relaxed);
    set_observer(this);
  }
  // Under mu: uninstalls `state` if it is the running one.
  void uninstall(ProfilerState* state) noexcept {
    if (current.load(std::memory_order_relaxed) != state) return;
    current.store(nullptr, std::memory_order_relaxed);
    set_observer(nullptr);
  }

  void on_launch(const StreamState& stream, const Ref<Work>& work, std::span<TensorState* const> reads,
                 std::span<TensorState* const> writes) noexcept override {
    // "marker" fits in the string itself: no allocation that could fail.
    std::string detail = work->is_marker() ? std::string("marker") : describe_tensors(reads, writes);
    locked([&](ProfilerState& s) {
      s.add_op(stream, work, std::move(detail), ProfilerState::OpRole::op, 0);
    });
  }

  void on_stream_wait(const StreamState& stream, const Ref<Work>& work,
                      const EventState& event) noexcept override {
    const std::uint64_t id = event.observer_id();
    locked([&](ProfilerState& s) { s.add_op(stream, work, {}, ProfilerState::OpRole::wait, id); });
  }

  void on_record(const EventState& event, const Ref<Work>& work, std::int64_t at_ns) noexcept override {
    // The record is made: without memory for the event's name, the profile misses it.
    std::string name;
    try {
      name = event.str();
    } catch (...) {
      return;
    }
    const std::uint64_t id = event.observer_id();
    locked([&](ProfilerState& s) { s.add_record(id, std::move(name), work, at_ns); });
  }

  void on_host_wait(const WaitTarget& target, std::span<const Ref<Work>> ops, std::int64_t start_ns,
                    std::int64_t end_ns, WaitResult result) noexcept override {
    const bool finished = result == WaitResult::finished;
    if (target.event) {
      const std::uint64_t id = target.event->observer_id();
      locked([&](ProfilerState& s) { s.add_event_wait(id, ops, start_ns, end_ns, finished); });
    } else {
      locked([&](ProfilerState& s) {
        s.add_fence_wait(*target.timeline, target.seq, start_ns, end_ns, finished);
      });
    }
  }

  void on_wait_found_done(const WaitTarget& target) noexcept override {
    const std::uint64_t id = target.event ? target.event->observer_id() : 0;
    std::lock_guard lock(mu);
    if (ProfilerState* s = current.load(std::memory_order_relaxed)) {
      s->wait_found_done(id, target.timeline, target.seq);
    }
  }

  void on_callback(const EventState* event, std::string_view thread, std::int64_t start_ns,
                   std::int64_t end_ns) noexcept override {
    const std::uint64_t id = event ? event->observer_id() : 0;
    locked([&](ProfilerState& s) { s.add_callback(id, std::string(thread), start_ns, end_ns); });
  }

  // Runs `append` on the running state under the lock; what it throws (out of memory) is an
  // entry lost.
  template <class Append>
  void locked(Append&& append) noexcept {
    std::lock_guard lock(mu);
    ProfilerState* s = current.load(std::memory_order_relaxed);
    if (!s) return;
    try {
      append(*s);
    } catch (...) {
      s->count_lost();
    }
  }
};

namespace {

// The one Recorder: built before any code runs (constinit: no allocation, no guard on the
// way to it) and never destroyed, since a hook may come late, even during exit.
union NeverDestroyed {
  Recorder recorder;
  constexpr NeverDestroyed() : recorder() {}
  ~NeverDestroyed() {}
};
constinit NeverDestroyed g_recorder;

}  // namespace

Recorder& Recorder::get() noexcept { return g_recorder.recorder; }

ProfilerState::ProfilerState() : start_ns_(host_now_ns()) {}

void ProfilerState::start() {
  Recorder& r = Recorder::get();
  std::lock_guard lock(r.mu);
  if (r.recording()) {
    throw StateError("cannot start a Profiler: another one is recording (one at a time per "
                     "process); stop() it or let it go out of scope first");
  }
  r.install(this);
}

void ProfilerState::stop_recording() noexcept {
  Recorded dropped;  // destroyed unlocked: it releases Works
  Recorder& r = Recorder::get();
  std::lock_guard lock(r.mu);
  stopped_ = true;
  r.uninstall(this);
  dropped = std::move(recorded_);
}

std::uint64_t ProfilerState::id_of(const Work* work) const noexcept {
  auto it = ids_.find(work);
  return it == ids_.end() ? 0 : it->second;
}

std::uint32_t ProfilerState::thread_number(std::thread::id thread) {
  return threads_.try_emplace(thread,
                              static_cast<std::uint32_t>(threads_.size() + 1))
      .first->second;
}

void ProfilerState::add_op(const StreamState& stream, const Ref<Work>& work, std::string detail,
                           OpRole role, std::uint64_t event) {
  OpEntry entry;
  entry.work = work;
  entry.id = recorded_.ops.size() + 1;
  entry.stream = stream.name();
  entry.device = stream.device();
  entry.detail = std::move(detail);
  entry.role = role;
  entry.event = event;
  // What it waits for on other timelines (the same timeline is in order anyway). Work from
  // before the profile has no id and no arrow.
  for (const Dep& dep : work->deps()) {
    if (&dep.work->timeline() == &work->timeline()) continue;
    if (std::uint64_t id = id_of(dep.work.get());
        id != 0 && std::find(entry.waits_for.begin(), entry.waits_for.end(), id) == entry.waits_for.end()) {
      entry.waits_for.push_back(id);
    }
  }
  ids_.emplace(work.get(), entry.id);
  fences_.emplace(std::make_pair(&work->timeline(), work->seq()), entry.id);
  recorded_.ops.push_back(std::move(entry));
}

void ProfilerState::add_record(std::uint64_t event, std::string event_name, const Ref<Work>& op,
                               std::int64_t at_ns) {
  recorded_.records.push_back(RecordEntry{event, std::move(event_name), op ? id_of(op.get()) : 0, at_ns});
}

void ProfilerState::add_event_wait(std::uint64_t event, std::span<const Ref<Work>> ops,
                                   std::int64_t start_ns, std::int64_t end_ns, bool finished) {
  HostWaitEntry entry{event, thread_number(), start_ns, end_ns, finished, {}};
  for (const Ref<Work>& w : ops) {
    if (std::uint64_t id = id_of(w.get())) entry.ops.push_back(id);
  }
  add_host_wait(std::move(entry));
}

void ProfilerState::add_fence_wait(const Timeline& timeline, std::uint64_t seq, std::int64_t start_ns,
                                   std::int64_t end_ns, bool finished) {
  HostWaitEntry entry{0, thread_number(), start_ns, end_ns, finished, {}};
  if (auto it = fences_.find({&timeline, seq}); it != fences_.end()) entry.ops.push_back(it->second);
  add_host_wait(std::move(entry));
}

void ProfilerState::wait_found_done(std::uint64_t event, const Timeline* timeline,
                                    std::uint64_t seq) noexcept {
  if (t_wait_scope) return;
  auto thread = threads_.find(std::this_thread::get_id());
  if (thread == threads_.end()) return;  // this thread has not waited yet
  std::uint64_t fence_op = 0;
  if (timeline) {
    auto it = fences_.find({timeline, seq});
    if (it == fences_.end()) return;
    fence_op = it->second;
  }
  const std::int64_t now = host_now_ns();
  // This thread's last wait, among the latest few: a slice that timed out just before?
  int looked = 0;
  for (auto w = recorded_.host_waits.rbegin();
       w != recorded_.host_waits.rend() && looked < kFoundDoneLookBack; ++w, ++looked) {
    if (w->thread != thread->second) continue;
    const bool same = timeline ? w->event == 0 && w->ops.size() == 1 && w->ops[0] == fence_op
                               : w->event == event;
    if (same && !w->finished && now - w->end_ns <= kWaitSliceGapNs) {
      w->end_ns = now;
      w->finished = true;
    }
    return;
  }
}

void ProfilerState::add_callback(std::uint64_t event, std::string thread, std::int64_t start_ns,
                                 std::int64_t end_ns) {
  recorded_.callbacks.push_back(CallbackEntry{event, std::move(thread), start_ns, end_ns});
}

void ProfilerState::add_host_wait(HostWaitEntry entry) {
  HostWaitScope* scope = t_wait_scope;
  if (!scope) {
    recorded_.host_waits.push_back(std::move(entry));
    return;
  }
  if (!scope->blocked_) {
    scope->blocked_ = true;
    scope->event_ = entry.event;
    scope->start_ns_ = entry.start_ns;
  } else if (scope->event_ != entry.event) {
    scope->event_ = 0;  // slices on different events (wait_all): not one event's wait
  }
  for (std::uint64_t id : entry.ops) {
    if (std::find(scope->ops_.begin(), scope->ops_.end(), id) == scope->ops_.end()) {
      scope->ops_.push_back(id);
    }
  }
}

Profile ProfilerState::stop(std::chrono::nanoseconds timeout,
                            const std::function<void()>& between_waits) {
  Recorded rec;
  {
    Recorder& r = Recorder::get();
    std::lock_guard lock(r.mu);
    if (stopped_) throw StateError("Profiler::stop: the profiler has stopped already");
    stopped_ = true;
    r.uninstall(this);
    rec = std::move(recorded_);
    ids_.clear();
    fences_.clear();
  }

  // Every recorded op to its end, within the time limit. Work that cannot finish (held back
  // by a UserEvent nobody sets, or queued behind the op calling stop()) is left unfinished.
  // The wait goes in slices when someone is to be called between them (an interrupt check).
  const Deadline deadline = deadline_after(timeout);
  std::vector<bool> finished(rec.ops.size(), false);
  for (std::size_t i = 0; i < rec.ops.size(); ++i) {
    Work& w = *rec.ops[i].work;
    try {
      for (;;) {
        Deadline slice = deadline;
        if (between_waits) {
          const auto end = Clock::now() + kStopSlice;
          slice = deadline && *deadline < end ? deadline : Deadline(end);
        }
        if (w.done() || wait_for_fence(w.timeline(), w.seq(), slice)) {
          finished[i] = true;
          break;
        }
        if (expired(deadline)) break;
        between_waits();  // only reached with slices
      }
    } catch (const StateError&) {
      finished[i] = false;  // queued behind the calling op: see above
    }
  }
  // Their device times, a batch per timeline.
  {
    std::map<Timeline*, std::vector<Work*>> by_timeline;
    for (std::size_t i = 0; i < rec.ops.size(); ++i) {
      if (finished[i]) by_timeline[&rec.ops[i].work->timeline()].push_back(rec.ops[i].work.get());
    }
    for (auto& [timeline, works] : by_timeline) {
      try {
        timeline->await_timings(works);
      } catch (...) {
        // A device that cannot deliver its times: those ops are in the profile without.
      }
    }
  }
  const std::int64_t end_ns = host_now_ns();

  Profile p;
  p.duration_us_ = static_cast<double>(end_ns - start_ns_) / 1e3;
  p.start_ns_ = start_ns_;
  p.label_ = ::eventide::process_label();
  auto us = [&](std::int64_t ns) { return static_cast<double>(ns - start_ns_) / 1e3; };
  // A device's clock converted to the host's is off by its calibration (a microsecond or
  // so): a time outside the profile can only be that, and is brought inside.
  auto device_us = [&](std::int64_t ns) { return std::clamp(us(ns), 0.0, p.duration_us_); };

  // Events: small ids in the order they appear.
  std::unordered_map<std::uint64_t, std::uint64_t> events;
  auto event_id = [&](std::uint64_t global) -> std::uint64_t {
    if (global == 0) return 0;
    return events.try_emplace(global, events.size() + 1).first->second;
  };
  for (const RecordEntry& r : rec.records) event_id(r.event);

  p.ops_.reserve(rec.ops.size());
  for (std::size_t i = 0; i < rec.ops.size(); ++i) {
    OpEntry& e = rec.ops[i];
    const Work& w = *e.work;
    const bool is_wait = e.role == OpRole::wait;
    ProfiledOp op;
    op.id = e.id;
    op.name = w.name();
    op.stream = std::move(e.stream);
    op.device = e.device;
    op.seq = w.seq();
    op.detail = is_wait ? "event " + std::to_string(event_id(e.event)) : std::move(e.detail);
    op.is_wait = is_wait;
    op.is_marker = w.is_marker();
    op.finished = finished[i];
    op.waits_for = std::move(e.waits_for);
    if (finished[i]) {
      if (const std::exception_ptr& error = w.error()) op.error = describe_error(error);
      if (w.timing_known() && w.has_times()) {
        op.start_us = device_us(w.timeline().to_host_ns(w.start_ns()));
        op.end_us = std::max(*op.start_us, device_us(w.timeline().to_host_ns(w.end_ns())));
        for (const Work::Part& part : w.parts()) {
          const double start = device_us(w.timeline().to_host_ns(part.start_ns));
          op.parts.push_back(
              ProfiledPart{part.name, start, std::max(start, device_us(w.timeline().to_host_ns(part.end_ns)))});
        }
        std::stable_sort(op.parts.begin(), op.parts.end(),
                         [](const ProfiledPart& a, const ProfiledPart& b) { return a.start_us < b.start_us; });
      }
    }
    p.ops_.push_back(std::move(op));
  }

  for (RecordEntry& r : rec.records) {
    p.records_.push_back(ProfiledRecord{event_id(r.event), std::move(r.event_name), r.op, us(r.at_ns)});
  }

  // Host waits, a thread's slices of one wait made one again (see kWaitSliceGapNs).
  std::stable_sort(rec.host_waits.begin(), rec.host_waits.end(),
                   [](const HostWaitEntry& a, const HostWaitEntry& b) {
                     return a.thread != b.thread ? a.thread < b.thread : a.start_ns < b.start_ns;
                   });
  std::vector<HostWaitEntry> merged;
  for (HostWaitEntry& h : rec.host_waits) {
    if (!merged.empty()) {
      HostWaitEntry& last = merged.back();
      if (last.thread == h.thread && last.event == h.event && last.ops == h.ops && !last.finished &&
          h.start_ns - last.end_ns <= kWaitSliceGapNs) {
        last.end_ns = h.end_ns;
        last.finished = h.finished;
        continue;
      }
    }
    merged.push_back(std::move(h));
  }
  std::stable_sort(merged.begin(), merged.end(),
                   [](const HostWaitEntry& a, const HostWaitEntry& b) { return a.start_ns < b.start_ns; });
  for (HostWaitEntry& h : merged) {
    p.host_waits_.push_back(ProfiledHostWait{event_id(h.event), "thread " + std::to_string(h.thread),
                                             us(h.start_ns), us(h.end_ns), h.finished,
                                             std::move(h.ops)});
  }

  for (CallbackEntry& c : rec.callbacks) {
    p.callbacks_.push_back(
        ProfiledCallback{event_id(c.event), std::move(c.thread), us(c.start_ns), us(c.end_ns)});
  }

  // Ranges are recorded as they close: in the order they began instead (an outer range
  // before the ranges it holds).
  std::stable_sort(rec.ranges.begin(), rec.ranges.end(), [](const RangeEntry& a, const RangeEntry& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  for (RangeEntry& r : rec.ranges) {
    p.ranges_.push_back(ProfiledRange{std::move(r.name), "thread " + std::to_string(r.thread),
                                      us(r.start_ns), us(r.end_ns)});
  }
  return p;
}

}  // namespace detail

// --- HostWaitScope -----------------------------------------------------------------------

HostWaitScope::HostWaitScope() noexcept {
  if (!detail::Recorder::get().recording() || detail::t_wait_scope) return;
  open_ = true;
  detail::t_wait_scope = this;
}

HostWaitScope::~HostWaitScope() {
  if (!open_) return;
  detail::t_wait_scope = nullptr;
  if (!blocked_) return;
  const std::int64_t end_ns = detail::host_now_ns();
  detail::Recorder& r = detail::Recorder::get();
  std::lock_guard lock(r.mu);
  detail::ProfilerState* s = r.current.load(std::memory_order_relaxed);
  if (!s) return;
  try {
    s->recorded_.host_waits.push_back(detail::ProfilerState::HostWaitEntry{
        event_, s->thread_number(), start_ns_, end_ns, finished_, std::move(ops_)});
  } catch (...) {
    s->count_lost();  // a destructor: nothing may escape
  }
}

// --- Range -------------------------------------------------------------------------------

Range::Range(std::string name) noexcept {
  // The NVTX range first: it may only fail to be made, never throw.
  nvtx_id_ = detail::nvtx::start_range(name.c_str());
  if (!detail::Recorder::get().recording()) [[likely]] return;
  thread_ = std::this_thread::get_id();
  name_ = std::move(name);
  start_ns_ = detail::host_now_ns();
}

Range::~Range() {
  detail::nvtx::end_range(nvtx_id_);
  if (start_ns_ < 0) [[likely]] return;
  const std::int64_t end_ns = detail::host_now_ns();
  detail::Recorder& r = detail::Recorder::get();
  std::lock_guard lock(r.mu);
  detail::ProfilerState* s = r.current.load(std::memory_order_relaxed);
  // A range from before this profiler began (another one ran then) is not its.
  if (!s || start_ns_ < s->start_ns_) return;
  try {
    s->recorded_.ranges.push_back(detail::ProfilerState::RangeEntry{
        std::move(name_), s->thread_number(thread_), start_ns_, end_ns});
  } catch (...) {
    s->count_lost();  // a destructor: nothing may escape
  }
}

// --- Profiler ----------------------------------------------------------------------------

namespace {

// The process's label (set_process_label): set rarely, read once per profile.
std::mutex g_label_mu;
ProcessLabel g_label;

}  // namespace

void set_process_label(ProcessLabel label) {
  if (label.rank < -1) {
    throw InvalidArgument("set_process_label: rank " + std::to_string(label.rank) +
                          " is negative (-1 means no rank)");
  }
  if (label.size < 0) {
    throw InvalidArgument("set_process_label: size " + std::to_string(label.size) +
                          " is negative (0 means unknown)");
  }
  if (label.size > 0 && label.rank >= label.size) {
    throw InvalidArgument("set_process_label: rank " + std::to_string(label.rank) +
                          " is not below the size " + std::to_string(label.size));
  }
  std::lock_guard lock(g_label_mu);
  g_label = std::move(label);
}

ProcessLabel process_label() {
  std::lock_guard lock(g_label_mu);
  return g_label;
}

Profiler::Profiler() : state_(std::make_shared<detail::ProfilerState>()) { state_->start(); }

Profiler::~Profiler() { state_->stop_recording(); }

Profile Profiler::stop(std::chrono::nanoseconds timeout) { return state_->stop(timeout, {}); }

Profile Profiler::stop(std::chrono::nanoseconds timeout, const std::function<void()>& between_waits) {
  return state_->stop(timeout, between_waits);
}

// --- Profile -----------------------------------------------------------------------------

std::string Profile::str() const {
  std::vector<std::string> streams;
  for (const ProfiledOp& op : ops_) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
  }
  auto count = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const bool ms = duration_us_ >= 1000;
  std::string duration = profile::format_fixed(ms ? duration_us_ / 1000 : duration_us_, ms ? 2 : 1) +
                         (ms ? " ms" : " µs");
  return "<Profile: " + count(ops_.size(), "op", "ops") + " on " +
         count(streams.size(), "stream", "streams") + ", " +
         count(records_.size(), "record", "records") + ", " +
         count(host_waits_.size(), "host wait", "host waits") + ", " +
         count(callbacks_.size(), "callback", "callbacks") + ", " +
         (ranges_.empty() ? std::string() : count(ranges_.size(), "range", "ranges") + ", ") + duration +
         ">";
}

}  // namespace eventide
