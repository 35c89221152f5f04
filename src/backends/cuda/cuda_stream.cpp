#include "backends/cuda/cuda_stream.hpp"

#include <new>
#include <thread>
#include <utility>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_progress.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

using detail::Dep;
using detail::DepKind;
using detail::Ref;

namespace {

std::atomic<std::uint64_t>* as_counter(const PinnedWord& w) {
  // A pinned word the GPU writes with cuStreamWriteValue64 and the host reads: a lock-free
  // 64-bit atomic has the word's layout.
  static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));
  return reinterpret_cast<std::atomic<std::uint64_t>*>(w.host());
}

}  // namespace

// --- CudaTimeline ------------------------------------------------------------------------

CudaTimeline::CudaTimeline(std::string name, CudaDevice& device, PinnedWord word)
    : Timeline(std::move(name), as_counter(word)), device_(device), word_(std::move(word)) {}

void CudaTimeline::listener_added() noexcept { device_.wake(); }

void CudaTimeline::await_timing(Work& work) { Timing::get().await(work); }

void CudaTimeline::await_timings(std::span<Work* const> works) { Timing::get().await_all(works); }

std::int64_t CudaTimeline::to_host_ns(std::int64_t device_ns) const noexcept {
  return Timing::get().to_host_ns(device_.device().index(), device_ns);
}

// --- CudaStream --------------------------------------------------------------------------

CudaStream::StreamSlot::StreamSlot(CudaDevice& d) : device(d) { device.watcher().add_stream(); }
CudaStream::StreamSlot::~StreamSlot() { device.watcher().remove_stream(); }

CudaStream::CudaStream(Device device, std::uint64_t id, CudaDevice& owner, std::string timeline_name,
                       StreamRef native)
    : StreamState(device, id,
                  detail::Ref<detail::Timeline>(
                      new CudaTimeline(std::move(timeline_name), owner, PinnedWord::acquire()))),
      owner_(owner),
      native_(native),
      may_capture_(native.get() != nullptr),  // wrapped (an owned one binds its stream later)
      per_thread_(native.get() == cudaStreamPerThread),
      thread_(std::this_thread::get_id()),
      timeline_(static_cast<CudaTimeline&>(timeline())) {}

// The watcher holds the stream while work is in flight: nothing is left here.
CudaStream::~CudaStream() = default;

OwnedCudaStream::OwnedCudaStream(Device device, std::uint64_t id, CudaDevice& owner, int priority)
    : CudaStream(device, id, owner, detail::stream_name(device, id), StreamRef()), priority_(priority) {
  DeviceScope scope(device);
  own_ = OwnedStream::create(device, "for " + name(), priority);
  bind(own_);
}

OwnedCudaStream::~OwnedCudaStream() {
  // A stream destroyed with work still queued on the GPU (other code's) is released by CUDA
  // once that work completes. Here, not in own_'s destructor, for the stream's name in a
  // failure's message.
  own_.reset(name().c_str());
}

WrappedCudaStream::WrappedCudaStream(Device device, std::uint64_t id, CudaDevice& owner,
                                     StreamRef native, const std::string& what)
    : CudaStream(device, id, owner, detail::stream_name(device, id) + " (" + what + ")", native) {
  // (The special handles have the default priority, 0.)
  if (cudaStreamGetPriority(native.get(), &priority_) != cudaSuccess) {
    (void)cudaGetLastError();
    priority_ = 0;
  }
}

void CudaStream::check_submit() const {
  if (per_thread_ && std::this_thread::get_id() != thread_) {
    throw InvalidArgument(name() + " is the per-thread default stream of another thread: it can "
                          "only be used from the thread that wrapped it");
  }
  // Refused before anything touches the stream, so that another library's capture stays
  // valid (see capturing()).
  check_not_capturing();
  // The watcher must run before anything is submitted: submit() cannot start it.
  owner_.watcher().ensure_started();
}

void CudaStream::check_not_capturing() const {
  if (may_capture_.load(std::memory_order_relaxed)) refuse_if_capturing(native_.get(), name());
}

bool CudaStream::native_idle() const noexcept {
  // A capturing stream cannot be queried (cudaStreamQuery would invalidate the capture): what
  // it holds is not known to be done.
  if (may_capture_.load(std::memory_order_relaxed) && capturing(native_.get())) return false;
  // Other code's work on the native stream (or, if the device has failed, nothing runs).
  return cudaStreamQuery(native_.get()) != cudaErrorNotReady;
}

std::exception_ptr CudaStream::device_error() const { return owner_.broken(); }

Ref<Storage> CudaStream::workspace(std::size_t bytes) {
  std::lock_guard lock(workspace_mu_);
  if (!workspace_ || workspace_->bytes() < bytes) workspace_ = allocate_device(device(), bytes, native_.get());
  return workspace_;
}

// Fires when the host-side work the first held op waits for has finished: the watcher
// launches what can go.
class ReleaseListener final : public detail::OneShotListener {
 public:
  explicit ReleaseListener(std::shared_ptr<CudaStream> s) : stream_(std::move(s)) {}

 private:
  void run() noexcept override {
    stream_->release_due_.store(true, std::memory_order_release);
    stream_->owner_.wake();
  }

  std::shared_ptr<CudaStream> stream_;
};

const Dep* CudaStream::host_wait(const Work& work) noexcept {
  // Until the device has started (CudaDevice::start: CUPTI, the kernels' code), a body would
  // block in its launch behind other libraries' work; a per-thread stream cannot hold, and
  // launches at once.
  if (work.has_body() && !work.no_backend_kernels() && !per_thread_ && !owner_.started()) {
    return &owner_.started_dep();
  }
  for (const Dep& dep : work.deps()) {
    const Work& w = *dep.work;
    if (w.done() || &w.timeline() == &timeline()) continue;
    auto* other = dynamic_cast<CudaTimeline*>(&w.timeline());
    if (!other) return &dep;
    // GPU work still held on the host is host-side work: a GPU wait for it would stall the
    // device until the host launches it, and anything synchronizing the device meanwhile
    // (CUDA's lazy loading of a kernel) would deadlock.
    if (!w.launched()) return &dep;
    // Whether this stream can wait for it on the GPU is the producer's device's strategy.
    if (!other->device().progress().can_wait_on_gpu(owner_.progress(), w)) return &dep;
  }
  return nullptr;
}

void CudaStream::order_after(const Dep& dep, bool& decided_later) {
  Work& w = *dep.work;
  if (w.done()) return;
  // Whether it failed is known only once it has finished: this op's error is decided then.
  if (dep.kind != DepKind::order) decided_later = true;
  if (&w.timeline() == &timeline()) return;  // before it on this stream: ordered already
  auto& other = static_cast<CudaTimeline&>(w.timeline());  // host-side deps are done (held)
  other.device().progress().wait_on_gpu(*this, other, w);
}

void CudaStream::ensure_watched() noexcept {
  bool newly;
  {
    std::lock_guard lock(inflight_mu_);
    newly = !std::exchange(watched_, true);
  }
  watch_or_wake(newly);
}

void CudaStream::watch_or_wake(bool newly_watched) noexcept {
  if (newly_watched) {
    owner_.watcher().watch(std::static_pointer_cast<CudaStream>(shared_from_this()));
  } else {
    owner_.wake();
  }
}

void CudaStream::hold_until_ready() noexcept {
  const Dep* dep = host_wait(*held_.front());
  if (!dep) {  // finished meanwhile
    release_due_.store(true, std::memory_order_release);
    owner_.wake();
    return;
  }
  // Fires at once if it finishes meanwhile; it only sets a flag, so it may run under our lock.
  // Owned from here on: by the timeline once registered, which destroys it after it fires.
  std::unique_ptr<detail::OneShotListener> listener(
      new (std::nothrow) ReleaseListener(std::static_pointer_cast<CudaStream>(shared_from_this())));
  if (!listener) {
    // Out of memory for the listener: the watcher looks at the held work on each turn
    // instead (release_if_due finds it still waiting and comes back here).
    release_due_.store(true, std::memory_order_release);
    owner_.wake();
    return;
  }
  dep->work->timeline().listen(dep->work->seq(), std::move(listener));
}

void CudaStream::submit(Ref<Work> work) noexcept {
  std::exception_ptr lost;
  {
    std::lock_guard lock(launch_mu_);
    last_seq_ = work->seq();
    if (per_thread_ && !owner_.broken()) {
      if (const Dep* dep = host_wait(*work)) {
        // Held work is launched by the watcher, whose per-thread default stream is another.
        std::exception_ptr error;
        try {
          error = std::make_exception_ptr(InvalidArgument(
              work->describe() + " cannot wait for " + dep->work->describe() +
              ": work on a per-thread default stream cannot be held until host-side work "
              "finishes (eventide would launch it from its own thread, whose per-thread stream "
              "is another); use a stream of your own"));
        } catch (...) {
          error = std::current_exception();  // out of memory for the message: it fails all the same
        }
        work->set_error(std::move(error));
      }
    }
    // (A per-thread stream never holds work, so a failure set above is launched at once: it
    // only has to finish in order.)
    if (!held_.empty() || (!work->error() && !owner_.broken() && host_wait(*work))) {
      held_.push_back(std::move(work));  // (not launched: set_launched when it is)
      held_count_.store(held_.size(), std::memory_order_release);
      if (held_.size() == 1) hold_until_ready();
      ensure_watched();
      return;
    }
    lost = launch_locked(std::move(work));
  }
  if (lost) owner_.mark_broken(lost);
}

void CudaStream::release_if_due() noexcept {
  if (!release_due_.exchange(false, std::memory_order_acq_rel)) return;
  std::exception_ptr lost;
  {
    std::lock_guard lock(launch_mu_);
    while (!held_.empty() && !lost) {
      if (!owner_.broken() && host_wait(*held_.front())) {
        hold_until_ready();
        break;
      }
      Ref<Work> w = held_.pop_front();
      held_count_.store(held_.size(), std::memory_order_release);
      lost = launch_locked(std::move(w));
    }
  }
  if (lost) owner_.mark_broken(lost);
}

std::exception_ptr CudaStream::launch_locked(Ref<Work> work) noexcept {
  bool decided_later = false;
  auto fail = [&](std::exception_ptr e) {
    if (!work->error()) work->set_error(std::move(e));
  };
  std::exception_ptr lost = owner_.broken();
  if (lost) {
    // Nothing runs on this device any more: the work fails here, in order (what was before
    // it has been failed and passed by mark_broken).
    fail(lost);
    work->release_execution_state();
    work->set_launched();
    timeline_.advance(work->seq());
    return nullptr;
  }
  std::optional<DeviceScope> scope;  // over the body and the progress write
  try {
    scope.emplace(device());
    // A work that failed already runs nothing (unless it must be issued all the same: a
    // collective): it needs no ordering but its stream's.
    // (Only where all it depends on is on the GPU already: a per-thread stream's work that
    // had to be held has failed unlaunchable.)
    const bool must_issue = work->must_issue() && !host_wait(*work);
    if (!work->error() || must_issue) {
      for (const Dep& dep : work->deps()) order_after(dep, decided_later);
    }
    // Failures known now: the op is not launched at all (a collective is, and fails). Known
    // are those of finished work and of work that failed at its launch, such as a wait for a
    // failed event just before this op on its stream: it ran nothing, and its error is final
    // before the GPU has passed it (what the op would run after it must not run: a host body's
    // side effects, a kernel over inputs that were never written).
    for (const Dep& dep : work->deps()) {
      const Work& w = *dep.work;
      if (dep.kind != DepKind::order && (w.done() || w.failed_at_launch()) && w.error()) {
        fail(detail::dependency_error(*work, dep));
        break;
      }
    }
    if ((!work->error() || must_issue) && work->body()) {
      if (work->no_backend_kernels()) {
        work->body()();  // no kernel of ours, nothing to time: also while the device starts
      } else {
        Timing::Scope scope(Timing::get(), *work, native_.get());
        work->body()();
      }
    } else if (!work->error() && work->kind() == detail::WorkKind::marker) {
      // In the native stream itself, after whatever any code enqueued there before it: a timed
      // CUDA event, the marker's stamp (its progress write follows below).
      work->set_stamp(Timing::stamp(device().index(), native_.get()));
    }
  } catch (...) {
    fail(std::current_exception());
  }
  try {
    owner_.progress().publish(*this, *work);
  } catch (...) {
    // Without its progress write the timeline cannot move: the device is in trouble.
    lost = std::current_exception();
    fail(lost);
  }
  if (decided_later && !work->error()) work->decide_error_later();
  // Its launch has ended, its kernels and its progress write are in the stream: other streams
  // may wait for it on the GPU from now on (Work::launched).
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

bool CudaStream::retire() noexcept {
  const std::uint64_t done = timeline_.completed();
  const std::uint64_t oldest = oldest_inflight_.load(std::memory_order_acquire);
  ProgressPublisher& progress = owner_.progress();
  if (progress.gpu_writes_counter() && oldest != kNoneInFlight && done < oldest) {
    // Nothing has finished since the last turn: no lock (the watcher calls this on every turn
    // of its loop, and launches take the same lock: a watcher taking it in a tight loop made
    // launches queue behind it for tens of microseconds).
    timeline_.notify();
    return true;
  }
  WorkList finished;  // linked through the Works: no allocation (this is the watcher's loop)
  std::uint64_t last_finished = 0;
  bool more;
  {
    std::lock_guard lock(inflight_mu_);
    const std::uint64_t reached = progress.finished_through(done, inflight_);
    while (!inflight_.empty() && inflight_.front()->seq() <= reached) {
      last_finished = inflight_.front()->seq();
      finished.push_back(inflight_.pop_front());
    }
    oldest_inflight_.store(inflight_.empty() ? kNoneInFlight : inflight_.front()->seq(),
                           std::memory_order_release);
    more = !inflight_.empty() || held_count_.load(std::memory_order_acquire) > 0;
    if (!more) watched_ = false;
  }
  if (!finished.empty()) progress.reached(timeline_, last_finished);
  timeline_.notify();
  // (Not get(): until the device has started, that waits for CUPTI's start, behind other
  // libraries' work, and so would every callback of work that has finished.)
  Timing* timing = Timing::if_started();
  while (Ref<Work> retired = finished.pop_front()) {
    Work& w = *retired;
    (void)w.error();  // decides an error left for later while the deps are still there
    if (timing) {
      timing->retired(w);
    } else {
      Timing::retired_untimed(w);
    }
    progress.retired(w);
    w.release_execution_state();  // the op's references to memory go here
  }
  return more;
}

void CudaStream::abandon(const std::exception_ptr& error) noexcept {
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
  timeline_.advance(last);
  retire();
  while (Ref<Work> w = held.pop_front()) w->release_execution_state();
}

}  // namespace eventide::backends::cuda
