#include "backends/cuda/cuda_stream.hpp"

#include <pthread.h>
#include <sys/prctl.h>

#include <chrono>
#include <thread>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_api.hpp"
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
  return reinterpret_cast<std::atomic<std::uint64_t>*>(w.host);
}

bool memops_disabled_by_env() {
  const char* env = std::getenv("EVENTIDE_CUDA_MEMOPS");
  return env && std::strcmp(env, "0") == 0;
}

// Watcher pacing: spin while progress comes; after this long without any, sleep, starting
// at the first sleep and doubling up to the last.
constexpr auto kSpinWithoutProgress = std::chrono::microseconds(200);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::milliseconds(2);
// While someone listens (a host thread blocked in wait, a callback, CPU work waiting for GPU
// work), the watcher is how they learn that the GPU finished: it spins longer and never
// sleeps more than this, so a wait on work that runs for milliseconds returns within about
// this much of its end instead of up to kLongestSleep late.
constexpr auto kSpinWhileListened = std::chrono::milliseconds(1);
constexpr auto kLongestSleepWhileListened = std::chrono::microseconds(50);
// The watcher's timer slack: its short sleeps end when asked, not up to 50 µs later (Linux's
// default slack).
constexpr unsigned long kWatcherTimerSlackNs = 1000;
// How long work may sit in flight without progress before the device's health is checked.
constexpr auto kHealthCheckAfter = std::chrono::milliseconds(20);

}  // namespace

// --- CudaTimeline ------------------------------------------------------------------------

CudaTimeline::CudaTimeline(std::string name, CudaDevice& device, PinnedWord word)
    : Timeline(std::move(name), as_counter(word)), device_(device), word_(word) {}

CudaTimeline::~CudaTimeline() { release_word(word_); }

void CudaTimeline::listener_added() noexcept { device_.wake(); }

void CudaTimeline::await_timing(Work& work) { Timing::get().await(work); }

void CudaTimeline::await_timings(std::span<Work* const> works) { Timing::get().await_all(works); }

std::int64_t CudaTimeline::to_host_ns(std::int64_t device_ns) const noexcept {
  return Timing::get().to_host_ns(device_.device().index(), device_ns);
}

// --- CudaStream --------------------------------------------------------------------------

CudaStream::StreamSlot::StreamSlot(CudaDevice& d) : device(d) { device.add_stream(); }
CudaStream::StreamSlot::~StreamSlot() { device.remove_stream(); }

CudaStream::CudaStream(Device device, std::uint64_t id, CudaDevice& owner)
    : StreamState(device, id,
                  detail::Ref<detail::Timeline>(new CudaTimeline(detail::stream_name(device, id),
                                                                 owner, acquire_word()))),
      owner_(owner),
      timeline_(static_cast<CudaTimeline&>(timeline())) {
  use_device(device);
  check(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
        "for " + name());
}

CudaStream::CudaStream(Device device, std::uint64_t id, CudaDevice& owner, cudaStream_t native,
                       std::string what)
    : StreamState(device, id,
                  detail::Ref<detail::Timeline>(new CudaTimeline(
                      detail::stream_name(device, id) + " (" + what + ")", owner, acquire_word()))),
      owner_(owner),
      handle_(native),
      owns_handle_(false),
      per_thread_(native == cudaStreamPerThread),
      thread_(std::this_thread::get_id()),
      timeline_(static_cast<CudaTimeline&>(timeline())) {}

void CudaStream::check_submit() const {
  if (per_thread_ && std::this_thread::get_id() != thread_) {
    throw InvalidArgument(name() + " is the per-thread default stream of another thread: it can "
                          "only be used from the thread that wrapped it");
  }
  // The watcher must run before anything is submitted: submit() cannot start it.
  owner_.ensure_watcher();
}

bool CudaStream::native_idle() const noexcept {
  // Other code's work on the native stream (or, if the device has failed, nothing runs).
  return cudaStreamQuery(handle_) != cudaErrorNotReady;
}

CudaStream::~CudaStream() {
  // The watcher holds the stream while work is in flight: nothing is left here. A stream
  // destroyed with work still queued on the GPU is released once that work completes.
  if (owns_handle_ && handle_) {
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device().index());
    check_nothrow(cudaStreamDestroy(handle_), "cudaStreamDestroy", name().c_str());
    if (previous >= 0) cudaSetDevice(previous);
  }
}

std::exception_ptr CudaStream::device_error() const { return owner_.broken(); }

Ref<Storage> CudaStream::workspace(std::size_t bytes) {
  std::lock_guard lock(workspace_mu_);
  if (!workspace_ || workspace_->bytes() < bytes) workspace_ = allocate_device(device(), bytes, handle_);
  return workspace_;
}

// Fires when the host-side work the first held op waits for has finished: the watcher
// launches what can go.
class ReleaseListener final : public detail::Listener {
 public:
  explicit ReleaseListener(std::shared_ptr<CudaStream> s) : stream_(std::move(s)) {}
  void fire() noexcept override {
    stream_->release_due_.store(true, std::memory_order_release);
    stream_->owner_.wake();
  }

 private:
  std::shared_ptr<CudaStream> stream_;
};

const Dep* CudaStream::host_wait(const Work& work) noexcept {
  for (const Dep& dep : work.deps()) {
    const Work& w = *dep.work;
    if (w.done() || &w.timeline() == &timeline()) continue;
    auto* other = dynamic_cast<CudaTimeline*>(&w.timeline());
    if (!other) return &dep;
    // GPU work still held on the host is host-side work: a GPU wait for it would stall the
    // device until the host launches it, and anything synchronizing the device meanwhile
    // (CUDA's lazy loading of a kernel) would deadlock.
    if (!w.launched()) return &dep;
    if ((!owner_.mem_ops() || !other->device().mem_ops()) && !other->device().done_event(w)) {
      return &dep;
    }
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
  if (owner_.mem_ops() && other.device().mem_ops()) {
    check_driver(driver()->wait_value64(reinterpret_cast<CUstream>(handle_), other.counter_address(),
                                        w.seq(), CU_STREAM_WAIT_VALUE_GEQ),
                 "cuStreamWaitValue64", "(" + name() + " waiting for " + w.describe() + ")");
  } else if (cudaEvent_t ev = other.device().done_event(w)) {
    check(cudaStreamWaitEvent(handle_, ev, 0), "cudaStreamWaitEvent",
          "(" + name() + " waiting for " + w.describe() + ")");
  }
}

void CudaStream::publish(Work& w) {
  if (owner_.mem_ops()) {
    // The write is ordered after the op and makes its results visible to the host first.
    check_driver(driver()->write_value64(reinterpret_cast<CUstream>(handle_),
                                         timeline_.counter_address(), w.seq(),
                                         CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue64", "(progress of " + name() + ")");
    return;
  }
  cudaEvent_t done = owner_.take_event();
  if (cudaError_t st = cudaEventRecord(done, handle_); st != cudaSuccess) {
    owner_.give_event(done);
    check(st, "cudaEventRecord", "(progress of " + name() + ")");
  }
  try {
    owner_.set_done_event(w, done);
  } catch (...) {
    owner_.give_event(done);  // the caller takes the device for lost: the work fails
    throw;
  }
}

void CudaStream::ensure_watched() noexcept {
  bool newly = false;
  {
    std::lock_guard lock(inflight_mu_);
    if (!watched_) watched_ = newly = true;
  }
  if (newly) {
    owner_.watch(std::static_pointer_cast<CudaStream>(shared_from_this()));
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
  auto* listener = new (std::nothrow)
      ReleaseListener(std::static_pointer_cast<CudaStream>(shared_from_this()));
  if (!listener) {
    // Out of memory for the listener: the watcher looks at the held work on each turn
    // instead (release_if_due finds it still waiting and comes back here).
    release_due_.store(true, std::memory_order_release);
    owner_.wake();
    return;
  }
  dep->work->timeline().listen(dep->work->seq(), std::unique_ptr<detail::Listener>(listener));
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
      work->set_launched(false);
      held_.push_back(std::move(work));
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
  work->set_launched(true);
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
    timeline_.advance(work->seq());
    return nullptr;
  }
  try {
    use_device(device());
    // A work that failed already runs nothing: it needs no ordering but its stream's.
    if (!work->error()) {
      for (const Dep& dep : work->deps()) order_after(dep, decided_later);
    }
    // Failures known now: the op is not launched at all.
    for (const Dep& dep : work->deps()) {
      if (dep.kind != DepKind::order && dep.work->done() && dep.work->error()) {
        fail(detail::dependency_error(*work, dep));
        break;
      }
    }
    if (!work->error() && work->body()) {
      Timing::Scope scope(Timing::get(), *work, handle_);
      work->body()();
    } else if (!work->error() && work->kind() == detail::WorkKind::marker) {
      // In the native stream itself, after whatever any code enqueued there before it: a timed
      // CUDA event, the marker's stamp (its progress write follows below).
      work->set_stamp(Timing::get().stamp(device().index(), handle_));
    }
  } catch (...) {
    fail(std::current_exception());
  }
  try {
    publish(*work);
  } catch (...) {
    // Without its progress write the timeline cannot move: the device is in trouble.
    lost = std::current_exception();
    fail(lost);
  }
  if (decided_later) work->decide_error_later();
  {
    std::lock_guard lock(inflight_mu_);
    if (inflight_.empty()) oldest_inflight_.store(work->seq(), std::memory_order_release);
    inflight_.push_back(std::move(work));  // linked through the Work: no allocation
  }
  ensure_watched();
  return lost;
}

bool CudaStream::retire() noexcept {
  const std::uint64_t done = timeline_.completed();
  const std::uint64_t oldest = oldest_inflight_.load(std::memory_order_acquire);
  if (owner_.mem_ops() && oldest != kNoneInFlight && done < oldest) {
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
    std::uint64_t reached = done;
    if (!owner_.mem_ops()) {
      // Fallback: the watcher advances the counter as the events complete, in order. (A work
      // without an event failed to publish: the device is lost, and it has failed.)
      for (Work* w = inflight_.front(); w; w = w->next) {
        if (cudaEvent_t ev = owner_.done_event(*w); ev && cudaEventQuery(ev) != cudaSuccess) break;
        reached = w->seq();
      }
    }
    while (!inflight_.empty() && inflight_.front()->seq() <= reached) {
      last_finished = inflight_.front()->seq();
      finished.push_back(inflight_.pop_front());
    }
    oldest_inflight_.store(inflight_.empty() ? kNoneInFlight : inflight_.front()->seq(),
                           std::memory_order_release);
    more = !inflight_.empty() || held_count_.load(std::memory_order_acquire) > 0;
    if (!more) watched_ = false;
  }
  if (!owner_.mem_ops() && !finished.empty()) timeline_.advance(last_finished);
  timeline_.notify();
  while (Ref<Work> retired = finished.pop_front()) {
    Work& w = *retired;
    (void)w.error();  // decides an error left for later while the deps are still there
    Timing::get().retired(w);
    if (!owner_.mem_ops()) {
      if (cudaEvent_t ev = owner_.done_event(w)) {
        owner_.forget_done_event(w);
        owner_.give_event(ev);
      }
    }
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

// --- CudaDevice --------------------------------------------------------------------------

CudaDevice::CudaDevice(Device device) : device_(device) {
  check(cudaGetDeviceProperties(&props_, device.index()), "cudaGetDeviceProperties",
        "for " + device.str());
  if (const Driver* drv = driver(); drv && !memops_disabled_by_env()) {
    int supported = 0;
    mem_ops_ = drv->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                         device.index()) == CUDA_SUCCESS &&
               supported != 0;
  }
}

std::exception_ptr CudaDevice::broken() const {
  // Every launch asks: no lock until the device has failed (the watcher takes mu_ often).
  if (!is_broken_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mu_);
  return broken_;
}

namespace {

// The device's failure, naming it; without memory for the message, `error` itself.
std::exception_ptr device_failure(Device device, const std::exception_ptr& error) noexcept {
  try {
    try {
      std::rethrow_exception(error);
    } catch (const DeviceError& e) {
      return std::make_exception_ptr(DeviceError(
          device.str() + " has failed and cannot run more work (" + e.what() + ")", e.call(),
          e.status()));
    } catch (const std::exception& e) {
      return std::make_exception_ptr(
          DeviceError(device.str() + " has failed and cannot run more work (" + e.what() + ")"));
    }
  } catch (...) {
  }
  return error;
}

}  // namespace

template <class Fn>
void CudaDevice::for_each_watched(Fn&& fn) noexcept {
  // One at a time under mu_: a stream added or removed meanwhile may be seen or missed once.
  for (std::size_t i = 0;; ++i) {
    std::shared_ptr<CudaStream> s;
    {
      std::lock_guard lock(mu_);
      if (i >= watched_.size()) return;
      s = watched_[i];
    }
    fn(*s);
  }
}

void CudaDevice::mark_broken(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = device_failure(device_, error);
    error = broken_;
    is_broken_.store(true, std::memory_order_release);
  }
  for_each_watched([&](CudaStream& s) { s.abandon(error); });
}

void CudaDevice::add_stream() {
  std::lock_guard lock(mu_);
  // A stream may be on the list twice for a moment (see run()).
  // (Adds are serialized by mu_; a concurrent remove only lowers the need.)
  const std::size_t n = streams_.load(std::memory_order_relaxed) + 1;
  if (watched_.capacity() < 2 * n) watched_.reserve(2 * n + 16);
  streams_.fetch_add(1, std::memory_order_relaxed);  // after the reserve: it may throw
}

void CudaDevice::remove_stream() noexcept {
  // No mu_: this runs in ~CudaStream, and a stream's last reference may be dropped where mu_
  // is held (a std::mutex taken twice by one thread never returns: the watcher hung there,
  // and with it every later check_submit, watch and stop). The room stays reserved.
  streams_.fetch_sub(1, std::memory_order_relaxed);
}

void CudaDevice::ensure_watcher() {
  // Timing (CUPTI) is set up before the watcher thread exists, as when watch() started it:
  // CUPTI is enabled on the user's thread before the watcher makes its first CUDA call.
  (void)Timing::get();
  std::lock_guard lock(mu_);
  if (!thread_.joinable() && !stop_.load()) thread_ = detail::RuntimeThread([this] { run(); });
}

void CudaDevice::watch(std::shared_ptr<CudaStream> stream) noexcept {
  {
    std::lock_guard lock(mu_);
    // No allocation: add_stream() made room for every stream, twice.
    watched_.push_back(std::move(stream));
    watched_version_.fetch_add(1, std::memory_order_release);
    if (!thread_.joinable() && !stop_.load()) {
      try {
        thread_ = detail::RuntimeThread([this] { run(); });  // started by check_submit normally
      } catch (...) {
      }
    }
  }
  parker_->unpark();
}

void CudaDevice::stop(detail::Clock::time_point deadline) noexcept {
  stop_.store(true);
  parker_->unpark();
  detail::RuntimeThread t;
  {
    std::lock_guard lock(mu_);
    t = std::move(thread_);
  }
  t.join_until(deadline);
}

void CudaDevice::check_health() noexcept {
  cudaError_t failed = cudaSuccess;
  std::shared_ptr<CudaStream> on;
  for_each_watched([&](CudaStream& s) {
    if (failed != cudaSuccess) return;
    const cudaError_t st = s.query_native();
    if (st != cudaSuccess && st != cudaErrorNotReady) {
      failed = st;
      on = std::static_pointer_cast<CudaStream>(s.shared_from_this());
    }
  });
  if (failed == cudaSuccess) return;
  std::exception_ptr error;
  try {
    error = std::make_exception_ptr(DeviceError(
        "cudaStreamQuery reports " + describe(failed) + " on " + on->name(), "cudaStreamQuery", failed));
  } catch (...) {
    error = std::current_exception();  // out of memory for the message: the device fails all the same
  }
  mark_broken(std::move(error));
}

void CudaDevice::run() noexcept {
  pthread_setname_np(pthread_self(), "eventide-cuda");
  prctl(PR_SET_TIMERSLACK, kWatcherTimerSlackNs, 0, 0, 0);
  cudaSetDevice(device_.index());
  using Clock = detail::Clock;
  auto last_progress = Clock::now();
  auto sleep = std::chrono::nanoseconds(kFirstSleep);
  std::uint64_t wakes_seen = 0;
  std::vector<std::shared_ptr<CudaStream>> streams;
  std::vector<std::shared_ptr<CudaStream>> previous_streams;  // empty between turns
  std::uint64_t streams_version = ~std::uint64_t{0};
  while (!stop_.load(std::memory_order_acquire)) {
    // The list changes rarely: copied (under mu_, which launches also take) only when it has.
    // Out of memory for the copy, this turn takes the streams one by one from the list itself
    // (the watcher's loop must not fail), and the next turn tries to copy again.
    // The old copy's references are dropped only after mu_ is let go: the last reference to
    // a stream its user has dropped may be there, and ~CudaStream must not run under mu_.
    bool copied = true;
    if (watched_version_.load(std::memory_order_acquire) != streams_version) {
      {
        std::lock_guard lock(mu_);
        previous_streams.swap(streams);  // streams: the older buffer, emptied, its room kept
        try {
          streams.assign(watched_.begin(), watched_.end());
          streams_version = watched_version_.load(std::memory_order_relaxed);
        } catch (...) {
          streams.clear();
          streams.swap(previous_streams);  // as before the turn
          copied = false;
        }
      }
      previous_streams.clear();  // unlocked: may destroy streams
    }
    if (copied && streams.empty()) {
      parker_->park();
      last_progress = Clock::now();
      continue;
    }
    const std::uint64_t wakes = wakes_.load(std::memory_order_acquire);
    bool progress = wakes != wakes_seen;
    wakes_seen = wakes;
    bool listened = false;
    auto look_after = [&](CudaStream& stream) {
      const std::uint64_t before = stream.timeline().completed();
      stream.release_if_due();
      bool more = stream.retire();
      if (stream.timeline().completed() != before || !more) progress = true;
      if (stream.timeline().has_listeners()) listened = true;
      if (!more) {
        std::lock_guard lock(mu_);
        // retire() cleared the stream's flag under its own lock: a submit after that has
        // pushed it again, so one copy is dropped here.
        for (auto it = watched_.begin(); it != watched_.end(); ++it) {
          if (it->get() == &stream) {
            watched_.erase(it);
            watched_version_.fetch_add(1, std::memory_order_release);
            break;
          }
        }
      }
    };
    if (copied) {
      for (const std::shared_ptr<CudaStream>& stream : streams) look_after(*stream);
    } else {
      for_each_watched(look_after);
    }
    try {
      Timing::get().maintain();
    } catch (...) {
      // Nothing there is expected to throw; the watcher's loop must not end the process.
    }
    const auto now = Clock::now();
    if (progress) {
      last_progress = now;
      sleep = kFirstSleep;
      continue;
    }
    if (now - last_progress > kHealthCheckAfter) check_health();
    if (now - last_progress < (listened ? kSpinWhileListened : kSpinWithoutProgress)) {
      detail::cpu_relax();
      continue;
    }
    if (listened) sleep = std::min<std::chrono::nanoseconds>(sleep, kLongestSleepWhileListened);
    parker_->park(now + sleep);
    sleep = std::min<std::chrono::nanoseconds>(
        sleep * 2, listened ? std::chrono::nanoseconds(kLongestSleepWhileListened) : kLongestSleep);
  }
}

cudaEvent_t CudaDevice::done_event(const Work& work) {
  std::lock_guard lock(mu_);
  auto it = done_events_.find(&work);
  return it == done_events_.end() ? nullptr : it->second;
}

void CudaDevice::set_done_event(const Work& work, cudaEvent_t event) {
  std::lock_guard lock(mu_);
  done_events_[&work] = event;
}

void CudaDevice::forget_done_event(const Work& work) {
  std::lock_guard lock(mu_);
  done_events_.erase(&work);
}

cudaEvent_t CudaDevice::take_event() {
  {
    std::lock_guard lock(mu_);
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
  }
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags",
        "on " + device_.str());
  return e;
}

void CudaDevice::give_event(cudaEvent_t event) noexcept {
  std::lock_guard lock(mu_);
  try {
    spare_events_.push_back(event);
  } catch (...) {
    cudaEventDestroy(event);
  }
}

}  // namespace eventide::backends::cuda
