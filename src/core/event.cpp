// Events: EventState's state machine, timing and callbacks (core/event_state.hpp), and the
// public Event. Kept whole past 600 lines: the transitions share the event's one lock and its
// helpers (refresh, fold, finish), which a split would have to expose. Waiting is in wait.cpp, the kinds of event in their own files
// (core/event_kind.hpp).
#include <algorithm>
#include <atomic>

#include "core/backend.hpp"
#include "core/capture.hpp"
#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"

namespace eventide {
namespace detail {

namespace {

// Makes room in `v` for `n` elements, growing it geometrically (reserve(size() + 1) on every
// call would copy the vector each time).
template <class Vector>
void reserve_for(Vector& v, std::size_t n) {
  if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
}

// The next event id for observers (EventState::observer_id).
std::atomic<std::uint64_t> g_next_observer_id{1};

}  // namespace

void EventKind::reset(EventState& event) { event.reset_to_empty(); }

EventState::EventState(std::optional<Device> device, EventOptions options,
                       std::unique_ptr<EventKind> kind)
    : fixed_device_(device),
      device_(device),
      timing_(options.enable_timing),
      blocking_(options.blocking),
      interprocess_(options.interprocess),
      kind_(std::move(kind)) {}

EventState::~EventState() {
  if (void* native = native_event_.load(std::memory_order_acquire)) native_events_->destroy(native);
}

void EventState::fold_locked(const Ref<Work>& work) {
  if (work->error() && !error_) error_ = work->error();
  if (work->timing_known()) {
    fold_times_locked(work);
    return;
  }
  if (!untimed_.empty() && untimed_.back() == work) return;  // recorded again
  // Never allocates: record_work() made room for every pending Work (this runs in poll() and
  // in the listener, where nothing may fail).
  untimed_.push_back(work);
  if (untimed_.size() > untimed_scan_at_) {
    // An event recorded over and over: fold what has become known meanwhile, and look again
    // only when the list has doubled (amortized constant per record).
    untimed_.erase_if([this](const Ref<Work>& w) {
      if (!w->timing_known()) return false;
      fold_times_locked(w);
      return true;
    });
    untimed_scan_at_ = std::max(kUntimedScanMin, 2 * untimed_.size());
  }
}

void EventState::fold_times_locked(const Ref<Work>& work) {
  if (!work->has_times()) return;
  // The bounds' works are kept only where they have a stamp (GPU markers), the only case
  // that reads them: no reference counting on the record path of ops and CPU work.
  const bool stamped = work->stamp() != nullptr;
  if (work->timed()) {
    if (!any_timed_ || work->start_ns() < min_start_ns_) {
      min_start_ns_ = work->start_ns();
      earliest_ = stamped ? work : nullptr;
    }
    if (!any_timed_ || work->end_ns() > max_end_ns_) {
      max_end_ns_ = work->end_ns();
      latest_ = stamped ? work : nullptr;
    }
    any_timed_ = true;
  }
  if (!any_completion_ || work->end_ns() > completion_ns_) {
    completion_ns_ = work->end_ns();
    completion_work_ = stamped ? work : nullptr;
  }
  any_completion_ = true;
}

void EventState::resolve_timing() {
  std::vector<Ref<Work>> waiting;
  {
    std::lock_guard lock(mu_);
    waiting.assign(untimed_.begin(), untimed_.end());
  }
  if (waiting.empty()) return;
  for (const Ref<Work>& w : waiting) w->timeline().await_timing(*w);  // may block: unlocked
  std::lock_guard lock(mu_);
  untimed_.erase_if([this](const Ref<Work>& w) {
    if (!w->timing_known()) return false;
    fold_times_locked(w);
    return true;
  });
}

void EventState::refresh_locked(Actions& actions) {
  if (status_.load(std::memory_order_relaxed) != EventStatus::pending) return;
  pending_.erase_if([this](const Ref<Work>& w) {
    if (!w->done()) return false;
    fold_locked(w);
    return true;
  });
  if (pending_.empty()) {
    finish_locked(actions);
  } else if (!armed_ && (!callbacks_.empty() || !notifiers_.empty())) {
    arm_locked(actions);
  }
}

void EventState::arm_locked(Actions& actions) {
  armed_ = true;
  actions.arm = pending_.front();
  actions.arm_count = ++arm_count_;
}

void EventState::finish_locked(Actions& actions) {
  status_.store(error_ ? EventStatus::failed : EventStatus::finished, std::memory_order_release);
  finishes_.fetch_add(1, std::memory_order_acq_rel);
  actions.callbacks.splice(callbacks_);  // no allocation: this runs where nothing may fail
  actions.device = device_;
  actions.wake.swap(notifiers_);  // no allocation: this runs where nothing may fail
}

void EventState::run(Actions& actions) noexcept {
  for (auto& p : actions.wake) p->unpark();
  if (actions.expect_callbacks) {
    try {
      Runtime::get().dispatcher(actions.device).expect_soon();
    } catch (...) {
    }
  }
  if (!actions.callbacks.empty()) {
    // Allocates nothing (add_callback made the tasks and started the thread). After the
    // runtime has shut down (process exit) they are dropped, as documented.
    Runtime::get().dispatcher(actions.device).post(std::move(actions.callbacks), shared_from_this());
  }
  if (actions.arm) {
    Ref<Work> w = std::move(actions.arm);
    // No allocation: the listener is the event's own.
    armed_listener_.hold(shared_from_this());
    const std::uint64_t id = w->timeline().listen(w->seq(), armed_listener_);
    if (id != 0) {  // registered, not fired at once: remove_callback() may take it back
      std::lock_guard lock(mu_);
      // Unless it has fired meanwhile (and the event perhaps re-armed by another thread).
      if (armed_ && arm_count_ == actions.arm_count) {
        armed_timeline_ = w->timeline_ref();
        armed_listen_id_ = id;
      }
    }
  }
}

void EventState::on_armed_fence_passed() noexcept {
  Actions actions;
  {
    std::lock_guard lock(mu_);
    armed_ = false;
    armed_listen_id_ = 0;
    armed_timeline_ = nullptr;
    refresh_locked(actions);
  }
  run(actions);
}

void EventState::record(Ref<Work> work, std::optional<Device> device, Round round) {
  if (Observer* o = observer()) [[unlikely]] {
    record_observed(*o, std::move(work), round, device);
    return;
  }
  record_work(std::move(work), device, round);
}

void EventState::record_observed(Observer& observer, Ref<Work> work, Round round, std::optional<Device> device) {
  Ref<Work> op = work;
  const std::int64_t at = host_now_ns();
  record_work(std::move(work), device, round);
  // The record is made: the hook never throws (the caller would take it for a record that
  // failed).
  observer.on_record(*this, op, at);
}

void EventState::throw_device_mismatch(Device device, const std::string& what) const {
  throw InvalidArgument("cannot record " + what + " of " + device.str() + " on an event of " +
                        device_->str() + ": use one event per device");
}

void EventState::check_device(Device device, const StreamState& stream) {
  std::lock_guard lock(mu_);
  check_device_locked(device, [&] { return "a marker on " + stream.name(); });
}

void EventState::record_work(Ref<Work> work, std::optional<Device> device, Round round) {
  Actions actions;
  RunOnExit run_actions{*this, actions};
  {
    std::lock_guard lock(mu_);
    if (round == Round::fresh) refresh_locked(actions);
    if (device) check_device_locked(*device, [&] { return "work (" + work->describe() + ")"; });
    // Room for the Work, while a failure is still this call's exception (nothing has
    // changed): poll() and the listener move finished Works to untimed_, where nothing may
    // fail.
    // (Nothing to reserve for finished work whose time is known: the common CPU case.)
    if (!work->done()) {
      reserve_for(pending_, pending_.size() + 1);
      reserve_for(untimed_, untimed_.size() + pending_.size() + 1);
    } else if (!work->timing_known()) {
      reserve_for(untimed_, untimed_.size() + pending_.size() + 1);
    }
    if (round == Round::fresh && status_.load(std::memory_order_relaxed) != EventStatus::pending) clear_locked();
    if (device) device_ = device;
    ++records_;
    if (work->done()) {
      fold_locked(work);
    } else {
      pending_.push_back(std::move(work));
    }
    if (!pending_.empty()) {
      status_.store(EventStatus::pending, std::memory_order_release);
      refresh_locked(actions);
    } else {
      finish_locked(actions);
    }
  }
}

void EventState::record_nothing(Device device) {
  {
    std::lock_guard lock(mu_);
    check_device_locked(device, [] { return std::string("a tensor"); });
    device_ = device;
    if (status_.load(std::memory_order_relaxed) == EventStatus::empty) {
      status_.store(EventStatus::finished, std::memory_order_release);
    }
  }
  if (Observer* o = observer()) [[unlikely]] o->on_record(*this, nullptr, host_now_ns());
}

bool EventState::poll(bool demand) noexcept {
  EventStatus s = status_.load(std::memory_order_acquire);
  if (s != EventStatus::pending) return s != EventStatus::empty;
  Actions actions;
  bool finished;
  {
    std::lock_guard lock(mu_);
    refresh_locked(actions);
    finished = finished_locked();
    // Someone looks: the device's watcher publishes (soon: lock-free, allocates nothing).
    if (demand) {
      for (const Ref<Work>& w : pending_) w->timeline().demand(w->seq(), Demand::soon);
    }
  }
  run(actions);
  return finished;
}

EventStatus EventState::status() noexcept {
  poll();
  return status_.load(std::memory_order_acquire);
}

bool EventState::add_notifier(const Ref<Parker>& parker) {
  Actions actions;
  RunOnExit run_actions{*this, actions};
  bool added = false;
  {
    std::lock_guard lock(mu_);
    reserve_for(notifiers_, notifiers_.size() + 1);  // first: it may throw
    refresh_locked(actions);
    if (!finished_locked()) {
      notifiers_.push_back(parker);
      added = true;
      if (!armed_ && !pending_.empty()) arm_locked(actions);
    }
  }
  return added;
}

void EventState::remove_notifier(const Parker* parker) noexcept {
  std::lock_guard lock(mu_);
  auto it = std::find_if(notifiers_.begin(), notifiers_.end(),
                         [parker](const Ref<Parker>& p) { return p.get() == parker; });
  if (it != notifiers_.end()) notifiers_.erase(it);
}

void EventState::clear_locked() {
  pending_.clear();
  untimed_.clear();
  untimed_scan_at_ = kUntimedScanMin;
  min_start_ns_ = max_end_ns_ = completion_ns_ = 0;
  earliest_ = latest_ = completion_work_ = nullptr;
  any_timed_ = any_completion_ = false;
  error_ = nullptr;
  records_ = 0;
  device_ = fixed_device_;
  if (kind_) kind_->cleared();
}

void EventState::reset() {
  if (kind_) {
    kind_->reset(*this);
  } else {
    reset_to_empty();
  }
}

void EventState::reset_to_empty() {
  // The completion a refresh may find still has waiters and callbacks: they go on also when
  // the reset throws.
  Actions actions;
  RunOnExit run_actions{*this, actions};
  std::lock_guard lock(mu_);
  refresh_locked(actions);
  if (status_.load(std::memory_order_relaxed) == EventStatus::pending) {
    throw StateError("cannot reset " + str_locked() + " while it is pending: wait for it first");
  }
  clear_locked();
  status_.store(EventStatus::empty, std::memory_order_release);
}

void EventState::restart(const char* finish_first, std::unique_lock<RuntimeMutex>& kind_lock) {
  Actions actions;
  UnlockThenRun run_actions{*this, actions, kind_lock};
  std::lock_guard lock(mu_);
  refresh_locked(actions);
  if (status_.load(std::memory_order_relaxed) == EventStatus::pending) {
    throw StateError("cannot reset " + str_locked() + " while it is pending: " + finish_first);
  }
  // Room first (pending_ keeps one inline, whatever clear_locked gives back): out of memory, the
  // event is left as it was.
  reserve_for(pending_, 1);
  clear_locked();
  pending_.push_back(kind_->begin_round_locked());
  records_ = 1;
  status_.store(EventStatus::pending, std::memory_order_release);
}

EventState::CallbackId EventState::add_callback(Callback fn) {
  // Accepted only if a thread can run it: DeviceError at the process's thread limit.
  Runtime::get().dispatcher(device()).ensure_thread();
  // Its task, before the event takes it: out of memory is this call's exception, never a
  // callback that does not run. Declared first, it is destroyed (a user's callable) unlocked.
  CallbackList task;
  task.push_back(std::move(fn));
  Actions actions;
  RunOnExit run_actions{*this, actions};
  CallbackId id;
  {
    std::lock_guard lock(mu_);
    refresh_locked(actions);
    EventStatus s = status_.load(std::memory_order_relaxed);
    if (s == EventStatus::empty) {
      throw StateError("cannot add a callback to an empty event (" + str_locked() +
                       "): it would never be called; record work on it first");
    }
    id = next_callback_id_++;
    task.front()->id = id;
    if (s == EventStatus::pending) {
      callbacks_.splice(task);
      if (!armed_) arm_locked(actions);
      actions.expect_callbacks = true;
      actions.device = device_;
    } else {
      actions.callbacks.splice(task);
      actions.device = device_;
    }
  }
  return id;
}

bool EventState::remove_callback(CallbackId id) noexcept {
  std::unique_ptr<CallbackTask> removed;  // a user's callable: destroyed after the lock is let go
  Ref<Timeline> disarm_on;
  std::uint64_t disarm_id = 0;
  {
    std::lock_guard lock(mu_);
    removed = callbacks_.take(id);
    if (!removed) return false;  // handed to the dispatcher, or unknown
    // Nobody listens any more: take the listener back (it holds this event), or an event that
    // nothing refers to would live, with its listener, until its work finishes.
    if (callbacks_.empty() && notifiers_.empty() && armed_ && armed_listen_id_ != 0) {
      disarm_on = std::move(armed_timeline_);
      disarm_id = std::exchange(armed_listen_id_, 0);
    }
  }
  if (disarm_id != 0) {
    // The listener may hold the last reference to this event; `self` outlives its removal.
    std::shared_ptr<EventState> self = weak_from_this().lock();
    if (disarm_on->unlisten(disarm_id)) {
      // It never fired, and nothing armed the event again while it was registered (armed_
      // stayed true): the event is unarmed now. Arm it again if a callback or a waiter came
      // meanwhile.
      Actions actions;
      {
        std::lock_guard lock(mu_);
        armed_ = false;
        refresh_locked(actions);
      }
      run(actions);
    }  // else it fires (or fired): on_armed_fence_passed() unarms the event
  }
  return true;
}

std::exception_ptr EventState::error() {
  poll();
  std::lock_guard lock(mu_);
  return finished_locked() ? error_ : nullptr;
}

std::optional<Device> EventState::device() {
  std::lock_guard lock(mu_);
  return device_;
}

double EventState::time_elapsed_us() {
  poll();
  resolve_timing();
  std::lock_guard lock(mu_);
  if (!timing_) throw StateError("time_elapsed: " + str_locked() + " was created with timing disabled");
  if (!finished_locked()) {
    throw StateError("time_elapsed: " + str_locked() + " has not finished; wait() for it first");
  }
  if (error_) std::rethrow_exception(error_);
  if (!any_timed_) return 0.0;
  if (earliest_ && latest_ && earliest_ != latest_) {
    // Two points the device stamped (GPU markers): the device's own reading between them.
    if (auto ns = earliest_->stamp()->ns_until(*latest_->stamp())) return std::max(0.0, *ns) / 1e3;
  }
  return static_cast<double>(max_end_ns_ - min_start_ns_) / 1e3;
}

EventState::Completion EventState::completion() {
  poll();
  resolve_timing();
  std::lock_guard lock(mu_);
  if (!timing_) throw StateError("elapsed_time: " + str_locked() + " was created with timing disabled");
  if (!finished_locked()) {
    throw StateError("elapsed_time: " + str_locked() + " has not finished; wait() for it first");
  }
  if (error_) std::rethrow_exception(error_);
  if (!any_completion_) {
    throw StateError("elapsed_time: " + str_locked() + " has no device time: it tied only a tensor "
                     "no op produced, or work that was not timed (EVENTIDE_CUDA_TIMING=off)");
  }
  return Completion{completion_ns_, completion_work_};
}

std::string EventState::str() const {
  // The state as of now, not of the last poll; without demanding anything (printing an event
  // is not looking for its work: a capture's would take it for a poll).
  const_cast<EventState*>(this)->poll(/*demand=*/false);
  std::lock_guard lock(mu_);
  return str_locked();
}

std::string EventState::str_locked() const {
  // Plain string building: iostreams would format the numbers with the global locale.
  std::string out = "<";
  out += kind_ ? kind_->type_name() : "Event";
  out += ' ';
  out += name(status_.load(std::memory_order_relaxed));
  if (device_) out += " on " + device_->str();
  if (!kind_ || kind_->shows_records()) {
    out += ", " + std::to_string(records_) + (records_ == 1 ? " op" : " ops");
  }
  out += '>';
  return out;
}

EventState::Snapshot EventState::snapshot(SnapshotFor what) {
  Actions actions;
  RunOnExit run_actions{*this, actions};  // also if the copy below runs out of memory
  Snapshot snap;
  {
    std::lock_guard lock(mu_);
    refresh_locked(actions);
    snap.status = status_.load(std::memory_order_relaxed);
    snap.error = error_;
    if (what == SnapshotFor::stream_wait && kind_) {
      // What the kind hides from streams is left out; its error is in snap.error once it
      // has finished.
      snap.pending.reserve(pending_.size());
      for (const Ref<Work>& w : pending_) {
        if (!kind_->hidden_from_streams(*w)) snap.pending.push_back(w);
      }
    } else {
      snap.pending.assign(pending_.begin(), pending_.end());
    }
  }
  return snap;
}

std::uint64_t EventState::observer_id() const noexcept {
  std::uint64_t id = observer_id_.load(std::memory_order_relaxed);
  if (id != 0) return id;
  std::uint64_t fresh = g_next_observer_id.fetch_add(1, std::memory_order_relaxed);
  // Another thread may have given it one meanwhile: theirs stays.
  if (observer_id_.compare_exchange_strong(id, fresh, std::memory_order_relaxed)) return fresh;
  return id;
}

}  // namespace detail

// --- Event -------------------------------------------------------------------------------

std::string_view name(EventStatus status) noexcept {
  switch (status) {
    case EventStatus::empty: return "empty";
    case EventStatus::pending: return "pending";
    case EventStatus::finished: return "finished";
    case EventStatus::failed: return "failed";
  }
  return "?";
}

Event::Event() : Event(std::nullopt) {}

Event::Event(std::optional<Device> device, EventOptions options)
    : state_(std::make_shared<detail::EventState>(device, options)) {
  if (device) detail::Runtime::get().context(*device);  // InvalidArgument if unavailable
}

void Event::record(const Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgument("Event::record: the tensor is undefined");
  const auto& t = *tensor.state();
  detail::Ref<detail::Work> producer = t.producer();
  if (!producer) {
    state_->record_nothing(t.device);
    return;
  }
  state_->record(detail::CaptureState::record_of(std::move(producer), state_, t.device), t.device);
}

void Event::record(const Stream& stream) {
  auto& s = *stream.state();
  state_->check_device(s.device(), s);
  state_->record(s.mark_for(state_, state_->timing_enabled() ? detail::StreamState::MarkerTiming::timed
                                                            : detail::StreamState::MarkerTiming::untimed),
                 s.device());
}

void Event::record() {
  std::optional<Device> d = state_->device();
  if (!d) d = detail::block_device();
  record(Stream::current(d ? *d : default_device()));
}

bool Event::poll() const noexcept { return state_->poll(); }
EventStatus Event::status() const noexcept { return state_->status(); }
std::optional<Device> Event::device() const { return state_->device(); }
bool Event::timing_enabled() const noexcept { return state_->timing_enabled(); }
EventOptions Event::options() const noexcept {
  return EventOptions{.enable_timing = state_->timing_enabled(),
                      .blocking = state_->blocking(),
                      .interprocess = state_->interprocess()};
}

std::chrono::duration<double, std::micro> Event::time_elapsed() const {
  return std::chrono::duration<double, std::micro>(state_->time_elapsed_us());
}

std::chrono::duration<double, std::milli> Event::elapsed_time(const Event& end) const {
  auto da = device();
  auto db = end.device();
  // Host work (UserEvents) and the CPU share the host clock; devices have their own.
  auto domain = [](const std::optional<Device>& d) { return d && !d->is_cpu() ? d : std::nullopt; };
  if (domain(da) != domain(db)) {
    throw InvalidArgument("elapsed_time: the events are on different devices (" +
                          (da ? da->str() : "host") + ", " + (db ? db->str() : "host") +
                          "), whose clocks cannot be compared");
  }
  const detail::EventState::Completion a = state_->completion();
  const detail::EventState::Completion b = end.state_->completion();
  if (a.work && b.work && a.work != b.work) {
    // Two points the device stamped (GPU markers): its own reading, as a CUDA event pair.
    if (auto ns = a.work->stamp()->ns_until(*b.work->stamp())) {
      return std::chrono::duration<double, std::milli>(*ns / 1e6);
    }
  }
  return std::chrono::duration<double, std::milli>(static_cast<double>(b.ns - a.ns) / 1e6);
}

std::exception_ptr Event::error() const { return state_->error(); }
void Event::reset() { state_->reset(); }
Event::CallbackId Event::add_callback_impl(detail::Callback fn) {
  return state_->add_callback(std::move(fn));
}
bool Event::remove_callback(CallbackId id) noexcept { return state_->remove_callback(id); }
void Event::throw_null_callback() { throw InvalidArgument("add_callback: the callback is null"); }
std::string Event::str() const { return state_->str(); }

}  // namespace eventide
