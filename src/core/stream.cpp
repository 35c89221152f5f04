// Streams: StreamState (core/stream_state.hpp), the public Stream and StreamGuard, and the
// execution loop shared by host-run backends.
#include <algorithm>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/capture.hpp"
#include "core/event_state.hpp"
#include "core/graph_recorder.hpp"
#include "core/nvtx.hpp"
#include "core/observer.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"

namespace eventide {
namespace detail {

namespace {

}  // namespace

std::string stream_name(Device device, std::uint64_t id) {
  return device.str() + " stream " + std::to_string(id);
}

StreamState::StreamState(Device device, std::uint64_t id, Ref<Timeline> timeline)
    : device_(device),
      id_(id),
      timeline_(timeline ? std::move(timeline) : make_ref<Timeline>(stream_name(device, id))) {}

StreamState::~StreamState() = default;

const Ref<Work>& StreamState::current_gate() noexcept {
  // A successful gate orders nothing any more: drop it so later work need not check it.
  if (gate_ && gate_->done() && !gate_->error()) gate_ = nullptr;
  return gate_;
}

void StreamState::submit_locked(Ref<Work> work) noexcept {
  last_ = work;
  submit(std::move(work));
}

Ref<Work> StreamState::launch(std::string name, std::span<TensorState* const> reads,
                              std::span<TensorState* const> writes, Callback body,
                              const LaunchOptions& options) {
  // The launch as an NVTX range named like the op; declared first, so it is closed after the
  // submit lock below is let go (core/nvtx.hpp).
  nvtx::Scope range(name.c_str());
  Runtime::get().check_running();
  check_submit();
  if (in_capture()) [[unlikely]] {
    if (std::shared_ptr<CaptureState> c = capture()) {
      // (A capture that ends from here on refuses the op itself: CaptureState::add_op.)
      if (options.capture_epoch != 0 && options.capture_epoch != capture_epoch()) throw_capture_moved(name);
      return c->add_op(*this, std::move(name), reads, writes, std::move(body), options);
    }
  }
  auto work = make_ref<Work>(timeline_, std::move(name), WorkKind::op);
  work->body() = std::move(body);
  if (options.must_issue) work->set_must_issue();
  if (options.no_backend_kernels) work->set_no_backend_kernels();
  if (options.keeps_parts) [[unlikely]] work->set_keeps_parts();
  // The memory the body uses, kept until it has run. An op without a body touches no memory
  // (it only orders: "empty", a copy made before the launch), and keeps none: its tensors'
  // memory may go back as soon as they do.
  Work::Keep& keep = work->keep();
  if (work->has_body()) {
    keep.reserve(reads.size() + writes.size() + (options.keep ? 1 : 0));
    for (TensorState* t : reads) keep.push_back(t->storage);
    for (TensorState* t : writes) {
      // (A tensor the op also reads, as an in-place op's, is kept once.)
      bool read = false;
      for (TensorState* r : reads) read = read || r == t;
      if (!read) keep.push_back(t->storage);
    }
  }
  if (options.keep) keep.push_back(options.keep);
  Work::Deps& deps = work->deps();
  deps.reserve(reads.size() + writes.size() + options.also_after.size() + 2);
  if (options.after && !options.after->done()) deps.push_back(Dep{options.after, DepKind::order});
  for (const Ref<Work>& w : options.also_after) {
    if (!w->done()) deps.push_back(Dep{w, DepKind::order});
  }

  std::lock_guard lock(submit_mu_);
  // A body made in a capture that has since ended, or before one that has begun (exactly
  // here: a capture begins and ends under this lock).
  if (options.capture_epoch != 0 && options.capture_epoch != capture_epoch()) [[unlikely]] {
    throw_capture_moved(work->name());
  }
  // The number comes first: once the hazards below publish the work, other threads may
  // test it for completion.
  work->set_seq(++enqueued_);
  if (const Ref<Work>& gate = current_gate()) deps.push_back(Dep{gate, DepKind::gate});
  try {
    for (TensorState* t : reads) t->use_for_read(work, deps);
    const DepKind writer = options.overwrites ? DepKind::order : DepKind::input;
    for (TensorState* t : writes) t->use_for_write(work, deps, writer);
  } catch (...) {
    // Out of memory half-way through the hazards: some tensors may already name this work,
    // so it must still finish, in order. It fails instead of running.
    work->set_error(std::current_exception());
    work->body() = Callback();
    submit_locked(work);
    throw;
  }
  // Recorded before it is submitted, while its deps are still there to be read.
  if (Observer* o = observer()) [[unlikely]] o->on_launch(*this, work, reads, writes);
  submit_locked(work);
  return work;
}

Ref<Work> StreamState::mark(MarkerTiming timing) {
  sync_native_capture(false);
  refuse_in_capture("a marker that no event is recorded on");
  return enqueue_marker(timing == MarkerTiming::timed ? WorkKind::marker : WorkKind::untimed_marker,
                        MarkerOwner::user);
}

Ref<Work> StreamState::mark_for(const std::shared_ptr<EventState>& event, MarkerTiming timing) {
  sync_native_capture(false);
  if (in_capture()) [[unlikely]] {
    if (std::shared_ptr<CaptureState> c = capture()) return c->add_event(this, event);
  }
  return enqueue_marker(timing == MarkerTiming::timed ? WorkKind::marker : WorkKind::untimed_marker,
                        MarkerOwner::user);
}

std::shared_ptr<CaptureState> StreamState::capture() const {
  std::lock_guard lock(submit_mu_);
  return capture_;
}

void StreamState::begin_capture(std::shared_ptr<CaptureState> capture) {
  std::lock_guard lock(submit_mu_);
  if (capture_) {
    throw StateError(name() + " is captured already (" + capture_->str() +
                     "): end that capture first, or capture on another stream");
  }
  capture_epoch_.fetch_add(1, std::memory_order_acq_rel);
  capture_native_.store(capture->native_stream(), std::memory_order_release);
  capture_ = std::move(capture);
  capturing_.store(true, std::memory_order_release);
}

Ref<Work> StreamState::end_capture(const CaptureState& capture) noexcept {
  std::shared_ptr<CaptureState> ours;  // released outside the lock
  std::lock_guard lock(submit_mu_);
  if (capture_.get() != &capture) return nullptr;
  ours = std::move(capture_);
  capture_epoch_.fetch_add(1, std::memory_order_acq_rel);
  capturing_.store(false, std::memory_order_release);
  capture_native_.store(nullptr, std::memory_order_release);
  return last_;
}

void StreamState::throw_capture_moved(const std::string& op) const {
  throw StateError(op + " on " + name() + ": a capture of the stream began or ended while the op "
                   "was being issued (by another thread), so it was neither captured nor run; "
                   "issue it again, and order issuing on a stream with its capture's begin and end");
}

void StreamState::sync_native_capture(bool join) {
  if (!may_be_captured()) [[likely]] return;
  if (in_capture()) {
    std::shared_ptr<CaptureState> c = capture();
    if (c && !c->follows_other_code()) return;  // eventide's own capture, on a stream of its own
    if (c) {
      if (c->other_capture_open()) return;
      c->end_followed();  // under no lock: the capture Work's listeners run
    }
  }
  if (!join) return;
  std::lock_guard lock(follow_mu_);
  if (in_capture()) return;  // another thread's op followed it meanwhile
  if (std::unique_ptr<GraphRecorder> recorder = follow_native_capture()) {
    CaptureState::follow(shared_from_this(), std::move(recorder));
  }
}

void StreamState::refuse_in_capture(const std::string& call, CaptureCaller who) const {
  if (!in_capture()) [[likely]] return;
  if (std::shared_ptr<CaptureState> c = capture()) {
    // Another thread's synchronize or query of the stream: nothing captured runs, so it is
    // about what the stream ran before the capture, as if the capture were not there.
    if (who == CaptureCaller::owner_only && !c->began_on_this_thread()) return;
    c->refuse(call + " on " + name() + " cannot be captured: nothing in a capture runs until the "
              "graph is replayed; call it after the capture ends");
  }
}

bool StreamState::wait_in_capture(EventState& event, std::span<const Ref<Work>> pending, bool failed) {
  std::shared_ptr<CaptureState> theirs;
  for (const Ref<Work>& w : pending) {
    if (std::shared_ptr<CaptureState> c = CaptureState::of(*w)) theirs = std::move(c);
  }
  std::shared_ptr<CaptureState> mine = capture();
  if (!mine && !theirs) return false;
  if (!mine) {
    // A stream waiting on an event recorded in a capture joins it, as CUDA's capture does.
    if (!theirs->join(shared_from_this())) {
      theirs->refuse(name() + " waits on an event recorded in it, and cannot join it: a capture "
                     "takes streams of its own device (" + theirs->device().str() + ") alone");
    }
    mine = std::move(theirs);
  }
  if (failed && pending.empty()) {
    mine->refuse(name() + " waits on " + event.str() + ", which failed: a graph cannot wait on it "
                 "at each replay; capture without that wait");
  }
  mine->add_wait(*this, event, pending);
  return true;
}

Ref<Work> StreamState::enqueue_marker(WorkKind kind, MarkerOwner owner) {
  Runtime::get().check_running();
  check_submit();
  auto work = make_ref<Work>(timeline_, "marker", kind);
  std::lock_guard lock(submit_mu_);
  work->set_seq(++enqueued_);
  const Ref<Work>& gate = current_gate();
  if (gate) work->deps().push_back(Dep{gate, DepKind::gate});
  if (last_ && last_ != gate && !(last_->done() && !last_->error())) {
    work->deps().push_back(Dep{last_, DepKind::previous});
  }
  if (owner == MarkerOwner::user) {
    if (Observer* o = observer()) [[unlikely]] o->on_launch(*this, work, {}, {});
  }
  submit_locked(work);
  return work;
}

void StreamState::wait(EventState& event) {
  Runtime::get().check_running();
  EventState::Snapshot snap = event.snapshot();
  if (snap.status == EventStatus::empty) {
    throw StateError(name() + ": cannot wait on an empty event (" + event.str() +
                     "): it would never finish");
  }
  // A capturing stream's wait, or a wait on an event recorded in a capture, is the capture's.
  sync_native_capture(false);
  if (in_capture() || !snap.pending.empty()) {
    if (wait_in_capture(event, snap.pending, snap.error != nullptr)) return;
  }
  // Finished without error: there is nothing to order after. (A failed event still makes a
  // wait, which fails in order and breaks the stream.)
  if (snap.pending.empty() && !snap.error) return;
  check_submit();
  auto work = make_ref<Work>(timeline_, "wait", WorkKind::wait);
  Work::Deps& deps = work->deps();
  deps.reserve(snap.pending.size() + 1);
  for (Ref<Work>& w : snap.pending) deps.push_back(Dep{std::move(w), DepKind::waited});

  if (snap.error) {
    // Already failed: the wait fails in order, when the stream reaches it. Made before it is
    // numbered: once it is, nothing may throw (a number never submitted would never pass).
    std::string what = name() + ": waits on an event that failed: " +
                       describe_error(root_cause(snap.error));
    work->set_error(std::make_exception_ptr(OpError(what, "wait", root_cause(snap.error))));
  }

  std::lock_guard lock(submit_mu_);
  work->set_seq(++enqueued_);
  if (const Ref<Work>& gate = current_gate()) deps.push_back(Dep{gate, DepKind::gate});
  gate_ = work;
  if (Observer* o = observer()) [[unlikely]] o->on_stream_wait(*this, work, event);
  submit_locked(work);
}

bool StreamState::query() const {
  refuse_in_capture("query", CaptureCaller::owner_only);
  if (!own_work_done()) {
    timeline_->demand(enqueued(), Demand::soon);  // someone looks
    return false;
  }
  return native_idle();
}

bool StreamState::own_work_done() const { return timeline_->passed(enqueued()); }

std::uint64_t StreamState::sync_point() {
  refuse_in_capture("synchronize", CaptureCaller::owner_only);
  // The marker synchronize needs is no work of the user's: observers do not see it.
  if (native_handle()) return enqueue_marker(WorkKind::untimed_marker, MarkerOwner::runtime)->seq();
  return enqueued();
}

std::uint64_t StreamState::enqueued() const {
  std::lock_guard lock(submit_mu_);
  return enqueued_;
}

std::exception_ptr StreamState::error() const {
  std::lock_guard lock(submit_mu_);
  if (gate_ && gate_->done()) return gate_->error();
  return nullptr;
}

const Dep* first_pending_dep(const Work& work) noexcept {
  for (const Dep& dep : work.deps()) {
    if (!dep.work->done()) return &dep;
  }
  return nullptr;
}

void run_work(Work& work, const std::atomic<bool>& stop) noexcept {
  const bool stopping = stop.load(std::memory_order_acquire);
  if (!work.error()) {
    if (stopping) {
      work.set_error(shutdown_error(work));
    } else if (auto e = first_dependency_error(work)) {
      work.set_error(std::move(e));
    }
  }
  // A collective runs all the same when a dependency failed: its peers wait for it.
  const bool runs = !work.error() || (work.must_issue() && !stopping);
  std::int64_t start = host_now_ns();
  std::int64_t end = start;
  // A wait has no device time of its own; observed, its times say how long it held
  // the stream: from when the stream reached it (set_reached) to when what it waited for had
  // finished. Ops are timed from when their dependencies had finished.
  if (!work.timed() && work.start_ns() != 0) start = work.start_ns();
  if (runs && work.body()) {
    set_running_work(&work);
    try {
      nvtx::Scope range(work.name().c_str());  // the op's run, on the host thread running it
      work.body()();
    } catch (...) {
      if (!work.error()) work.set_error(body_error(work, std::current_exception()));
    }
    set_running_work(nullptr);
    end = host_now_ns();
  }
  work.set_times(start, end);
  work.release_execution_state();
  work.timeline().advance(work.seq());
}

}  // namespace detail

// --- Stream ------------------------------------------------------------------------------

Stream::Stream(Device device) : state_(detail::Runtime::get().create_stream(device)) {}

Stream::Stream(Device device, StreamOptions options)
    : state_(detail::Runtime::get().create_stream(device, options.priority)) {}

int Stream::priority() const noexcept { return state_->priority(); }

std::pair<int, int> stream_priority_range(Device device) {
  return detail::Runtime::get().context(device).backend().stream_priority_range();
}

Stream Stream::current(Device device) { return Stream(detail::Runtime::get().current_stream(device)); }

Stream Stream::default_stream(Device device) {
  return Stream(detail::Runtime::get().context(device).default_stream());
}

Stream Stream::from_native(Device device, void* native_stream) {
  return Stream(detail::Runtime::get().wrap_stream(device, native_stream));
}

Stream Stream::from_native(void* native_stream) {
  auto& rt = detail::Runtime::get();
  return Stream(rt.wrap_stream(rt.native_stream_device(native_stream), native_stream));
}

Device Stream::device() const { return state_->device(); }
void* Stream::native_handle() const {
  // In a capture that records into a native graph, the capture's native stream (what other
  // code launches there is captured); the stream's own is not handed out.
  if (void* captured = state_->capture_native()) return captured;
  state_->mark_exposed();
  return state_->native_handle();
}
std::uint64_t Stream::id() const { return state_->id(); }
std::string Stream::str() const { return state_->name(); }

void Stream::wait(const Event& event) { state_->wait(*event.state()); }

void Stream::wait(const Event& event, WaitScope scope) {
  if (scope == WaitScope::native_stream && state_->native_handle()) {
    // Only work the device runs from a device-written timeline, already launched, can be
    // waited for on the device; anything else (held GPU work, a CPU op, a UserEvent) is waited
    // for here, so that the native stream's later launches follow it too.
    detail::EventState::Snapshot snap = event.state()->snapshot();
    const bool host_side =
        std::any_of(snap.pending.begin(), snap.pending.end(), [](const detail::Ref<detail::Work>& w) {
          return !w->launched() || !w->timeline().device_written();
        });
    if (host_side) event.wait();
  }
  wait(event);
}

void Stream::wait_stream(const Stream& other) {
  if (other.state_ == state_) return;  // a stream is always ordered after itself
  // A marker, not the last op: it also covers what other code enqueued on a native stream.
  state_->wait(*other.record_event(EventOptions{.enable_timing = false}).state());
}

Event Stream::record_event(EventOptions options) const {
  Event e(device(), options);
  e.record(*this);
  return e;
}

bool Stream::query() const { return state_->query(); }
std::exception_ptr Stream::error() const { return state_->error(); }

Event Stream::enqueue_impl(std::string name, detail::Callback fn, std::vector<Tensor> reads,
                           std::vector<Tensor> writes) {
  if (!fn) throw InvalidArgument("Stream::enqueue: the function is null");
  std::vector<detail::TensorState*> r;
  std::vector<detail::TensorState*> w;
  auto collect = [&](const std::vector<Tensor>& ts, std::vector<detail::TensorState*>& out,
                     const char* role) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].defined()) {
        throw InvalidArgument("Stream::enqueue(\"" + name + "\"): " + role + "[" +
                              std::to_string(i) + "] is an undefined tensor");
      }
      const Device on = ts[i].state()->device;
      if (on != device()) {
        throw InvalidArgument("Stream::enqueue(\"" + name + "\"): " + role + "[" +
                              std::to_string(i) + "] is on " + on.str() + ", the stream on " +
                              device().str());
      }
      out.push_back(ts[i].state().get());
    }
  };
  collect(reads, r, "reads");
  collect(writes, w, "writes");
  if (name.empty()) name = "enqueue";
  // (The launch keeps the memory of the tensors until the function has run.)
  auto work = state_->launch(std::move(name), r, w, std::move(fn));
  Event e(device());
  e.state()->record(std::move(work), device());
  return e;
}

// --- StreamGuard -------------------------------------------------------------------------

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()),
      previous_((detail::reserve_current_stream(stream.device()),
                 detail::exchange_current_stream(stream.device(), stream.state()))),
      previous_block_device_(detail::exchange_block_device(stream.device())) {}

StreamGuard::~StreamGuard() {
  // previous_ may hold no stream: the thread had none set for this device.
  detail::exchange_current_stream(device_, previous_.state());
  detail::exchange_block_device(previous_block_device_);
}

}  // namespace eventide
