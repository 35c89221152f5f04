// The timing facade (cuda_timing.hpp): chooses the mode's strategy (cuda_timing_modes.hpp) at
// its start, and does what every mode shares: the markers' stamps and their pool, fork, and
// waiting for an op's launch to end before its time is asked.
#include "backends/cuda/cuda_timing.hpp"
#include "core/spin_lock.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_timing_modes.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::backends::cuda {

using detail::Ref;
using detail::Work;

namespace {

// This process is the child of a fork (Timing::forget_after_fork): the modes' locks may have
// been held by a thread of the parent's, and CUDA does not work here. Nothing takes them.
std::atomic<bool> g_forked{false};

Timing::Mode mode_from_env() {
  const char* env = std::getenv("EVENTIDE_CUDA_TIMING");
  if (!env || !*env || std::strcmp(env, "cupti") == 0) return Timing::Mode::cupti;
  if (std::strcmp(env, "events") == 0) return Timing::Mode::events;
  if (std::strcmp(env, "off") == 0) return Timing::Mode::off;
  std::fprintf(stderr, "eventide: EVENTIDE_CUDA_TIMING=%s is not cupti, events or off; using cupti\n", env);
  return Timing::Mode::cupti;
}

Timing::Mode env_mode() {
  static const Timing::Mode mode = mode_from_env();
  return mode;
}

// The off mode: nothing is timed.
class OffTiming final : public TimingMode {
 public:
  Timing::Mode mode() const noexcept override { return Timing::Mode::off; }
  void retired(Work& work) noexcept override { work.finish_timing(); }
};

// Markers' events (timed), per device, for reuse. Made (cheaply: no CUDA call) apart from the
// timing's start, so that stamps can be taken before it (Timing::stamp).
struct StampPool {
  // A spin lock: a marker's launch takes an event while the watcher gives back those of the
  // markers it retires, a burst at a time, and a launch must not sleep behind them (on the
  // H200 the stamp took 2.9 µs under a mutex, where cudaEventRecord alone takes 1.2). Under
  // it nothing but the lists' own growth allocates.
  detail::SpinLock mu;
  std::unordered_map<int, std::vector<cudaEvent_t>> spare;

  cudaEvent_t take(int device) {
    std::lock_guard lock(mu);
    auto& s = spare[device];
    if (s.empty()) return nullptr;
    cudaEvent_t ev = s.back();
    s.pop_back();
    return ev;
  }
  void give(int device, cudaEvent_t ev) noexcept {
    if (g_forked.load(std::memory_order_acquire)) return;  // the parent's event: left alone
    {
      std::lock_guard lock(mu);
      try {
        spare[device].push_back(ev);
        return;
      } catch (...) {
      }
    }
    cudaEventDestroy(ev);  // no room to keep it
  }
};

StampPool& stamp_pool() {
  static StampPool* pool = new StampPool();  // never destroyed, as Timing
  return *pool;
}

std::atomic<Timing*> g_started{nullptr};  // Timing::if_started

// A work's calls are noted when its launch ends (its timing scope closes), before its end is
// published; Work::launched() says the launch has ended, and reading it orders this thread
// after the note. A work seen finished has been launched, or is about to be: waits for it
// (microseconds; bounded, for work that was held and then failed without a launch).
void wait_launch_ended(const Work& work) noexcept {
  constexpr auto kLongestLaunch = std::chrono::milliseconds(50);
  if (work.launched()) return;
  const auto give_up = detail::Clock::now() + kLongestLaunch;
  while (!work.launched() && detail::Clock::now() < give_up) std::this_thread::yield();
}

}  // namespace

// --- CudaStamp -------------------------------------------------------------------------------

CudaStamp::~CudaStamp() { stamp_pool().give(device_, event_); }

std::optional<double> CudaStamp::ns_until(const detail::Stamp& later) const noexcept {
  auto* other = dynamic_cast<const CudaStamp*>(&later);
  if (!other || other->device_ != device_) return std::nullopt;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, event_, other->event_) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<double>(ms) * kNsPerMs;
}

std::optional<float> CudaStamp::ms_since(cudaEvent_t from) const noexcept {
  float ms = 0;
  if (from && cudaEventElapsedTime(&ms, from, event_) == cudaSuccess) return ms;
  (void)cudaGetLastError();
  return std::nullopt;
}

// --- Timing ----------------------------------------------------------------------------------

void Timing::forget_after_fork() noexcept { g_forked.store(true, std::memory_order_release); }

Timing& Timing::get() {
  static Timing* t = [] {
    auto* made = new Timing();  // never destroyed: CUPTI may call back during exit
    g_started.store(made, std::memory_order_release);
    return made;
  }();
  return *t;
}

Timing* Timing::if_started() noexcept { return g_started.load(std::memory_order_acquire); }

Timing::Timing() : mode_(env_mode()) {
  if (mode_ == Mode::cupti) {
    impl_ = make_cupti_timing(why_not_cupti_);
    if (!impl_) {
      std::fprintf(stderr, "eventide: CUPTI is unavailable (%s): CUDA op times fall back to event "
                           "pairs, which include launch gaps\n", why_not_cupti_.c_str());
      mode_ = Mode::events;
    }
  }
  if (mode_ == Mode::events) impl_ = make_event_timing();
  if (mode_ == Mode::off) impl_ = std::make_unique<OffTiming>();
}

std::string Timing::describe(Mode mode, const std::string& why_not_cupti) {
  switch (mode) {
    case Mode::cupti: return "CUPTI activity records (each op's own kernels and copies)";
    case Mode::events:
      return "CUDA event pairs (include launch gaps" +
             (why_not_cupti.empty() ? std::string(")") : "; CUPTI: " + why_not_cupti + ")");
    case Mode::off: return "off (EVENTIDE_CUDA_TIMING=off)";
  }
  return "?";
}

std::string Timing::describe() const { return describe(mode_, why_not_cupti_); }

std::string Timing::describe_without_waiting() {
  if (Timing* t = if_started()) return t->describe();
  std::string mode = describe(env_mode(), "");
  if (env_mode() == Mode::cupti) mode += ", once CUPTI has started (with the device's first work, on a thread of eventide's)";
  return mode;
}

detail::Ref<detail::Stamp> Timing::stamp(int device, cudaStream_t stream) {
  // A timed CUDA event, whichever mode ends up in use (CUPTI's start may still be under way on
  // the watcher: it is not needed here).
  if (env_mode() == Mode::off) return nullptr;
  StampPool& pool = stamp_pool();
  cudaEvent_t ev = pool.take(device);
  if (!ev) {
    check(cudaEventCreate(&ev), "cudaEventCreate",
          [&] { return "(a marker's event on cuda:" + std::to_string(device) + ")"; });
  }
  if (cudaError_t st = cudaEventRecord(ev, stream); st != cudaSuccess) {
    pool.give(device, ev);
    check(st, "cudaEventRecord", "(a marker on cuda:" + std::to_string(device) + ")");
  }
  return detail::Ref<detail::Stamp>(new CudaStamp(device, ev));
}

Timing::Scope::Scope(Timing& timing, Work& work, cudaStream_t stream)
    : timing_(timing), work_(work), stream_(stream) {
  timing_.impl_->open(state_, work_, stream_);
}

Timing::Scope::~Scope() { timing_.impl_->close(state_, work_, stream_); }

void Timing::retired_untimed(Work& work) noexcept {
  // As retired() finds such a work: a marker's time is read from its stamp; anything else has
  // no time.
  if (work.is_marker() && work.stamp()) return;
  if (!work.timing_known()) work.finish_timing();
}

void Timing::retired(Work& work) noexcept {
  if (g_forked.load(std::memory_order_acquire)) {
    work.finish_timing();
    return;
  }
  if (work.is_marker() && mode_ != Mode::off) {
    // Its time is read from its stamp when someone asks (await): measuring it may need a
    // calibration, which is no work for the watcher.
    retired_untimed(work);
    return;
  }
  impl_->retired(work);
}

void Timing::time_marker(Work& work) {
  const auto* stamp = static_cast<const CudaStamp*>(work.stamp().get());
  std::optional<std::int64_t> ns;
  if (stamp && !g_forked.load(std::memory_order_acquire)) ns = impl_->marker_ns(*this, *stamp);
  if (!ns) {
    work.finish_timing();  // no time (off, a forked child, or CUDA cannot say)
    return;
  }
  work.set_times(*ns, *ns);
}

void Timing::await(Work& work) {
  Work* one[] = {&work};
  await_all(one);
}

void Timing::await_all(std::span<Work* const> works) {
  bool unknown = false;
  for (Work* w : works) {
    if (w->timing_known()) continue;
    if (w->is_marker()) {
      time_marker(*w);
      continue;
    }
    wait_launch_ended(*w);
    retired(*w);  // finished (the caller waited for it), even if the watcher has not seen it yet
    if (!w->timing_known()) unknown = true;
  }
  // Every one of them is retired now: the mode makes their times known.
  if (unknown) impl_->flush_until_known(works);
}

std::int64_t Timing::to_host_ns(int device, std::int64_t device_ns) noexcept {
  if (g_forked.load(std::memory_order_acquire)) return device_ns;
  return impl_->to_host_ns(device, device_ns);
}

void Timing::maintain() { impl_->maintain(); }

}  // namespace eventide::backends::cuda
