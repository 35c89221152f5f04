#include "backends/cuda/cuda_timing.hpp"

#include <cupti.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::backends::cuda {

using detail::Ref;
using detail::Work;

namespace {

constexpr std::size_t kBufferSize = std::size_t{4} << 20;
// CUPTI wants its activity buffers aligned to this many bytes.
constexpr std::size_t kBufferAlignment = 8;
// cudaEventElapsedTime's milliseconds to nanoseconds.
constexpr double kNsPerMs = 1e6;
// CUPTI's clock against the host's: the narrowest of this many brackets.
constexpr int kClockBrackets = 8;
// Device memory for the calibration's one-element kernel.
constexpr std::size_t kCalibrationScratchBytes = 64;
// The watcher flushes CUPTI's buffers once this many finished ops wait for their records.
constexpr std::size_t kFlushWhenRetired = 1024;
// Markers measured from an anchor more than this far away (float milliseconds: 60 ns steps at
// one second) make a new anchor, if the anchor is older than the second limit.
constexpr float kAnchorReachMs = 1000.0f;
constexpr std::int64_t kAnchorAgeNs = 1'000'000'000;
// A reference event that completed within this long was recorded on an idle stream.
constexpr std::int64_t kReferenceIdleNs = 100'000;
// CUPTI's clock against the host's: measured again when the last measure is this old, so
// that a long process follows a clock that is stepped or drifts.
constexpr std::int64_t kCalibrationAgeNs = 10'000'000'000;

// This process is the child of a fork (Timing::forget_after_fork).
std::atomic<bool> g_forked{false};

const char* cupti_text(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

}  // namespace

struct Timing::Impl {
  struct Entry {
    Ref<Work> work;
    std::vector<std::uint32_t> correlations;
    std::uint64_t retired_epoch = 0;  // 0: still running
    cudaEvent_t start = nullptr;      // events mode
    cudaEvent_t end = nullptr;
    int device = 0;
  };

  detail::RuntimeMutex mu;
  std::unordered_map<std::uint64_t, Entry> entries;  // by our correlation id
  std::unordered_map<const Work*, std::uint64_t> ids;
  std::unordered_map<std::uint32_t, std::uint64_t> by_correlation;  // CUPTI's id -> ours
  // Activity records whose external correlation record has not been seen yet.
  std::unordered_map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> orphans;
  std::uint64_t next_id = 1;
  std::uint64_t epoch = 1;
  // Retired entries not yet final. Changed under mu; read without it by maintain(), which the
  // watcher calls on every turn of its loop (taking mu there made op launches, which take it
  // too, queue behind a spinning watcher).
  std::atomic<std::size_t> retired_waiting{0};
  std::mutex flush_mu;
  std::string why;  // why CUPTI is not in use, if it is not

  // Events mode: per device, an event recorded at start-up that times are measured from, and
  // the host time (host_now_ns) at which it completed.
  std::unordered_map<int, cudaEvent_t> reference;
  std::unordered_map<int, std::int64_t> reference_host_ns;
  std::vector<cudaEvent_t> spare_events;

  // CUPTI's clock minus the host's, and when that was measured (host ns; 0: never). Under mu.
  std::int64_t cupti_offset_ns = 0;
  std::int64_t cupti_offset_at = 0;

  void merge(std::uint64_t id, std::uint64_t start, std::uint64_t end) {
    auto it = entries.find(id);
    if (it != entries.end()) it->second.work->merge_times(static_cast<std::int64_t>(start),
                                                          static_cast<std::int64_t>(end));
  }

  void take(CUpti_Activity* rec) {
    std::uint32_t correlation = 0;
    std::uint64_t start = 0, end = 0;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* r = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec);
        if (r->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return;
        auto it = entries.find(r->externalId);
        if (it == entries.end()) return;
        by_correlation[r->correlationId] = r->externalId;
        it->second.correlations.push_back(r->correlationId);
        if (auto o = orphans.find(r->correlationId); o != orphans.end()) {
          merge(r->externalId, o->second.first, o->second.second);
          orphans.erase(o);
        }
        return;
      }
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* r = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* r = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        auto* r = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(rec);
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* r = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      default:
        return;  // API records: only there so that the external correlation records exist
    }
    if (auto it = by_correlation.find(correlation); it != by_correlation.end()) {
      merge(it->second, start, end);
    } else {
      auto& o = orphans.try_emplace(correlation, start, end).first->second;
      o.first = std::min(o.first, start);
      o.second = std::max(o.second, end);
    }
  }

  // Events mode: the device's reference event, recorded (and its host time measured) on
  // first use; null if it could not be. Under mu.
  cudaEvent_t reference_of(int device) {
    if (auto it = reference.find(device); it != reference.end()) return it->second;
    cudaEvent_t ref;
    if (cudaEventCreate(&ref) != cudaSuccess) return nullptr;
    const std::int64_t before = detail::host_now_ns();
    if (cudaEventRecord(ref, nullptr) != cudaSuccess) {
      cudaEventDestroy(ref);
      return nullptr;
    }
    cudaEventSynchronize(ref);
    const std::int64_t after = detail::host_now_ns();
    reference[device] = ref;
    // It completed between the two: on an idle stream at once (the middle is within a few
    // microseconds); behind other work (the legacy stream is shared), just before the
    // synchronize returned.
    reference_host_ns[device] = after - before < kReferenceIdleNs ? before + (after - before) / 2 : after;
    return ref;
  }

  // Markers' events (timed), per device, for reuse.
  std::unordered_map<int, std::vector<cudaEvent_t>> spare_stamps;
  void give_stamp(int device, cudaEvent_t ev) noexcept {
    if (g_forked.load(std::memory_order_acquire)) return;  // the parent's event: left alone
    std::lock_guard lock(mu);
    try {
      spare_stamps[device].push_back(ev);
    } catch (...) {
      cudaEventDestroy(ev);
    }
  }

  // CUPTI mode: per device, a CUDA event whose time on CUPTI's clock is known, that markers'
  // events are measured from (cudaEventElapsedTime, exact to float precision within a second
  // or so: hence made again when the one in use is older than that). Under calibration_mu.
  struct Anchor {
    cudaEvent_t event = nullptr;
    cudaEvent_t after = nullptr;
    std::int64_t cupti_ns = 0;
    std::int64_t made_host_ns = 0;
    cudaStream_t stream = nullptr;
    void* scratch = nullptr;
  };
  std::mutex calibration_mu;
  std::unordered_map<int, Anchor> anchors;

  // Makes final the entries that retired before `before`. Under mu.
  void finalize(std::uint64_t before) {
    for (auto it = entries.begin(); it != entries.end();) {
      Entry& e = it->second;
      if (e.retired_epoch == 0 || e.retired_epoch >= before) {
        ++it;
        continue;
      }
      for (std::uint32_t c : e.correlations) by_correlation.erase(c);
      e.work->finish_timing();
      ids.erase(e.work.get());
      retired_waiting.fetch_sub(1, std::memory_order_relaxed);
      it = entries.erase(it);
    }
    // Records still without their correlation record belong to other code's launches.
    orphans.clear();
  }
};

namespace {

Timing::Impl* g_impl = nullptr;  // for CUPTI's C callbacks

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *size = kBufferSize;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferSize));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  // Called by CUPTI (C): nothing may escape. A record that cannot be kept (out of memory)
  // is lost: its op's time is then partial or unknown, never wrong about completion.
  if (g_impl && valid > 0) {
    std::lock_guard lock(g_impl->mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      try {
        g_impl->take(rec);
      } catch (...) {
      }
    }
  }
  std::free(buffer);
}

Timing::Mode mode_from_env() {
  const char* env = std::getenv("EVENTIDE_CUDA_TIMING");
  if (!env || !*env || std::strcmp(env, "cupti") == 0) return Timing::Mode::cupti;
  if (std::strcmp(env, "events") == 0) return Timing::Mode::events;
  if (std::strcmp(env, "off") == 0) return Timing::Mode::off;
  std::fprintf(stderr, "eventide: EVENTIDE_CUDA_TIMING=%s is not cupti, events or off; using cupti\n", env);
  return Timing::Mode::cupti;
}

std::string start_cupti() {
  auto fail = [](const char* call, CUptiResult r) { return std::string(call) + ": " + cupti_text(r); };
  if (CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
    return fail("cuptiActivityRegisterCallbacks", r);
  }
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET}) {
    if (CUptiResult r = cuptiActivityEnable(kind); r != CUPTI_SUCCESS) {
      return fail("cuptiActivityEnable", r);
    }
  }
  // External correlation records come with API records, so the API calls are recorded too.
  // This makes each CUDA call of the process slower while CUPTI runs (cudaEventQuery 1.3 µs
  // instead of 0.3 on an H200). Recording only the launching calls
  // (cuptiActivityEnableRuntimeApi) lost the records of kernels launched with <<<>>> under
  // CUDA 13, and with them their times.
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER}) {
    if (CUptiResult r = cuptiActivityEnable(kind); r != CUPTI_SUCCESS) return fail("cuptiActivityEnable", r);
  }
  return {};
}

}  // namespace

void Timing::forget_after_fork() noexcept { g_forked.store(true, std::memory_order_release); }

Timing& Timing::get() {
  static Timing* t = new Timing();  // never destroyed: CUPTI may call back during exit
  return *t;
}

Timing::Timing() : impl_(new Impl()), mode_(mode_from_env()) {
  g_impl = impl_;
  if (mode_ == Mode::cupti) {
    impl_->why = start_cupti();
    if (impl_->why.empty()) {
      // CUPTI sets up its buffers with its first records, which takes a while: a traced call
      // and a flush here, so that the first op or marker timed does not carry it.
      int device = 0;
      (void)cudaGetDevice(&device);
      cuptiActivityFlushAll(0);
    }
    if (!impl_->why.empty()) {
      std::fprintf(stderr, "eventide: CUPTI is unavailable (%s): CUDA op times fall back to event "
                           "pairs, which include launch gaps\n", impl_->why.c_str());
      mode_ = Mode::events;
    }
  }
}

std::string Timing::describe() const {
  switch (mode_) {
    case Mode::cupti: return "CUPTI activity records (each op's own kernels and copies)";
    case Mode::events:
      return "CUDA event pairs (include launch gaps" +
             (impl_->why.empty() ? std::string(")") : "; CUPTI: " + impl_->why + ")");
    case Mode::off: return "off (EVENTIDE_CUDA_TIMING=off)";
  }
  return "?";
}

namespace {

// A marker's timed CUDA event; back to the pool when the marker is gone.
class CudaStamp final : public detail::Stamp {
 public:
  CudaStamp(Timing::Impl& impl, int device, cudaEvent_t event) noexcept
      : impl_(impl), device_(device), event_(event) {}
  ~CudaStamp() override { impl_.give_stamp(device_, event_); }

  std::optional<double> ns_until(const detail::Stamp& later) const noexcept override {
    auto* other = dynamic_cast<const CudaStamp*>(&later);
    if (!other || other->device_ != device_) return std::nullopt;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, event_, other->event_) != cudaSuccess) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
    return static_cast<double>(ms) * kNsPerMs;
  }

  int device() const noexcept { return device_; }
  cudaEvent_t event() const noexcept { return event_; }

 private:
  Timing::Impl& impl_;
  const int device_;
  const cudaEvent_t event_;
};

}  // namespace

detail::Ref<detail::Stamp> Timing::stamp(int device, cudaStream_t stream) {
  if (mode_ == Mode::off) return nullptr;
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard lock(impl_->mu);
    auto& spare = impl_->spare_stamps[device];
    if (!spare.empty()) {
      ev = spare.back();
      spare.pop_back();
    }
  }
  if (!ev) {
    check(cudaEventCreate(&ev), "cudaEventCreate", "(a marker's event on cuda:" + std::to_string(device) + ")");
  }
  if (cudaError_t st = cudaEventRecord(ev, stream); st != cudaSuccess) {
    impl_->give_stamp(device, ev);
    check(st, "cudaEventRecord", "(a marker on cuda:" + std::to_string(device) + ")");
  }
  return detail::Ref<detail::Stamp>(new CudaStamp(*impl_, device, ev));
}

namespace {

Timing::Impl::Anchor* calibrate(Timing& timing, Timing::Impl& impl, int device) {
  // On an idle private stream: an event, a one-element kernel that CUPTI times on its clock,
  // another event. The two events bracket the kernel on the device's clock; the time between
  // them outside the kernel is split evenly before and after it, which puts the first event
  // on CUPTI's clock within a fraction of a microsecond.
  Timing::Impl::Anchor& a = impl.anchors[device];
  int previous = -1;
  cudaGetDevice(&previous);
  if (cudaSetDevice(device) != cudaSuccess) return nullptr;
  auto restore = [&] {
    if (previous >= 0) cudaSetDevice(previous);
  };
  if (!a.stream && cudaStreamCreateWithFlags(&a.stream, cudaStreamNonBlocking) != cudaSuccess) {
    restore();
    return nullptr;
  }
  if (!a.event && (cudaEventCreate(&a.event) != cudaSuccess || cudaEventCreate(&a.after) != cudaSuccess ||
                   cudaMalloc(&a.scratch, kCalibrationScratchBytes) != cudaSuccess)) {
    (void)cudaGetLastError();
    restore();
    return nullptr;
  }
  auto timeline = detail::make_ref<detail::Timeline>("cuda timing calibration");
  auto probe = detail::make_ref<Work>(timeline, "calibration", detail::WorkKind::op);
  bool ok = cudaEventRecord(a.event, a.stream) == cudaSuccess;
  if (ok) {
    Timing::Scope scope(timing, *probe, a.stream);
    try {
      kernels::fill(a.scratch, 1, DType::f32, 0.0, a.stream);
    } catch (...) {
      ok = false;
    }
  }
  ok = ok && cudaEventRecord(a.after, a.stream) == cudaSuccess &&
       cudaEventSynchronize(a.after) == cudaSuccess;
  timing.await(*probe);  // retires it and flushes: CUPTI's record of the kernel
  float bracket_ms = 0;
  ok = ok && probe->has_times() && cudaEventElapsedTime(&bracket_ms, a.event, a.after) == cudaSuccess;
  restore();
  if (!ok) {
    (void)cudaGetLastError();
    a.cupti_ns = 0;
    return nullptr;
  }
  const double kernel_ns = static_cast<double>(probe->end_ns() - probe->start_ns());
  const double outside_ns = std::max(0.0, static_cast<double>(bracket_ms) * kNsPerMs - kernel_ns);
  a.cupti_ns = probe->start_ns() - static_cast<std::int64_t>(outside_ns / 2);
  a.made_host_ns = detail::host_now_ns();
  return &a;
}

// CUPTI mode, under impl.calibration_mu: the device's anchor, measured now if it has none.
Timing::Impl::Anchor* calibrated_anchor(Timing& timing, Timing::Impl& impl, int device) {
  auto it = impl.anchors.find(device);
  if (it != impl.anchors.end() && it->second.cupti_ns != 0) return &it->second;
  return calibrate(timing, impl, device);
}

}  // namespace

void Timing::time_marker(Work& work) {
  if (g_forked.load(std::memory_order_acquire)) {
    work.finish_timing();  // untimed in a forked child
    return;
  }
  const auto* stamp = static_cast<const CudaStamp*>(work.stamp().get());
  // Milliseconds from `from` to the marker's event; nullopt if CUDA cannot say.
  auto elapsed_from = [&](cudaEvent_t from) -> std::optional<float> {
    float ms = 0;
    if (from && cudaEventElapsedTime(&ms, from, stamp->event()) == cudaSuccess) return ms;
    (void)cudaGetLastError();
    return std::nullopt;
  };
  std::optional<float> ms;
  std::int64_t base = 0;
  if (mode_ == Mode::off || !stamp) {
    // no time
  } else if (mode_ == Mode::events) {
    std::lock_guard lock(impl_->mu);
    ms = elapsed_from(impl_->reference_of(stamp->device()));
  } else {
    std::lock_guard lock(impl_->calibration_mu);
    Impl::Anchor* anchor = calibrated_anchor(*this, *impl_, stamp->device());
    if (anchor) ms = elapsed_from(anchor->event);
    if (ms && std::abs(*ms) > kAnchorReachMs &&
        detail::host_now_ns() - anchor->made_host_ns > kAnchorAgeNs) {
      // Far from the anchor: float milliseconds lose precision; measure from a new one.
      anchor = calibrate(*this, *impl_, stamp->device());
      ms = anchor ? elapsed_from(anchor->event) : std::nullopt;
    }
    if (anchor) base = anchor->cupti_ns;
  }
  if (!ms) {
    work.finish_timing();
    return;
  }
  const std::int64_t ns = base + static_cast<std::int64_t>(static_cast<double>(*ms) * kNsPerMs);
  work.set_times(ns, ns);
}

Timing::Scope::Scope(Timing& timing, Work& work, cudaStream_t stream)
    : timing_(timing), work_(work), stream_(stream) {
  if (timing_.mode_ == Mode::off) return;
  Impl& impl = *timing_.impl_;
  cudaEvent_t start = nullptr;
  {
    std::lock_guard lock(impl.mu);
    id_ = impl.next_id++;
    Impl::Entry& e = impl.entries[id_];
    e.work = Ref<Work>(&work);
    impl.ids[&work] = id_;
    if (timing_.mode_ == Mode::events) {
      cudaGetDevice(&e.device);
      impl.reference_of(e.device);
      for (cudaEvent_t* ev : {&e.start, &e.end}) {
        if (!impl.spare_events.empty()) {
          *ev = impl.spare_events.back();
          impl.spare_events.pop_back();
        } else {
          cudaEventCreate(ev);
        }
      }
      start = e.start;
    }
  }
  if (timing_.mode_ == Mode::cupti) {
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id_);
  } else {
    cudaEventRecord(start, stream_);
  }
}

Timing::Scope::~Scope() {
  if (timing_.mode_ == Mode::cupti) {
    std::uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  } else if (timing_.mode_ == Mode::events) {
    cudaEvent_t end = nullptr;
    {
      std::lock_guard lock(timing_.impl_->mu);
      // find, not []: a destructor must not insert (allocate).
      if (auto it = timing_.impl_->entries.find(id_); it != timing_.impl_->entries.end()) end = it->second.end;
    }
    if (end) cudaEventRecord(end, stream_);
  }
}

void Timing::retired(Work& work) noexcept {
  if (mode_ == Mode::off || g_forked.load(std::memory_order_acquire)) {
    work.finish_timing();
    return;
  }
  if (work.is_marker()) {
    // Its time is read from its stamp when someone asks (await): measuring it may need a
    // calibration, which is no work for the watcher.
    if (!work.stamp()) work.finish_timing();
    return;
  }
  std::lock_guard lock(impl_->mu);
  auto id = impl_->ids.find(&work);
  if (id == impl_->ids.end()) {
    if (!work.timing_known()) work.finish_timing();  // launched nothing timed (a wait)
    return;
  }
  auto it = impl_->entries.find(id->second);
  if (it == impl_->entries.end() || it->second.retired_epoch != 0) return;
  Impl::Entry& e = it->second;
  if (mode_ == Mode::events) {
    // The work has finished, so its events have completed.
    float start_ms = 0, end_ms = 0;
    auto ref_it = impl_->reference.find(e.device);  // not []: nothing here may allocate
    cudaEvent_t ref = ref_it == impl_->reference.end() ? nullptr : ref_it->second;
    if (ref && cudaEventElapsedTime(&start_ms, ref, e.start) == cudaSuccess &&
        cudaEventElapsedTime(&end_ms, ref, e.end) == cudaSuccess) {
      work.merge_times(static_cast<std::int64_t>(start_ms * kNsPerMs),
                       static_cast<std::int64_t>(end_ms * kNsPerMs));
    }
    for (cudaEvent_t ev : {e.start, e.end}) {
      if (!ev) continue;
      try {
        impl_->spare_events.push_back(ev);
      } catch (...) {
        cudaEventDestroy(ev);  // out of memory: not kept for reuse
      }
    }
    work.finish_timing();
    impl_->ids.erase(&work);
    impl_->entries.erase(it);
    return;
  }
  e.retired_epoch = impl_->epoch;
  impl_->retired_waiting.fetch_add(1, std::memory_order_relaxed);
}

void Timing::await(Work& work) {
  if (work.timing_known()) return;
  if (work.is_marker()) {
    time_marker(work);
    return;
  }
  retired(work);  // finished (the caller waited for it), even if the watcher has not seen it yet
  if (work.timing_known() || mode_ != Mode::cupti) return;
  std::lock_guard flush_lock(impl_->flush_mu);
  if (work.timing_known()) return;  // another thread's flush covered it
  flush_locked();
}

void Timing::await_all(std::span<Work* const> works) {
  bool unknown = false;
  for (Work* w : works) {
    if (w->timing_known()) continue;
    if (w->is_marker()) {
      time_marker(*w);
      continue;
    }
    retired(*w);  // finished, even if the watcher has not seen it yet
    if (!w->timing_known()) unknown = true;
  }
  if (!unknown || mode_ != Mode::cupti) return;
  // Every one of them is retired now: one flush makes all their times final.
  std::lock_guard flush_lock(impl_->flush_mu);
  flush_locked();
}

std::int64_t Timing::to_host_ns(int device, std::int64_t device_ns) noexcept {
  if (g_forked.load(std::memory_order_acquire)) return device_ns;
  switch (mode_) {
    case Mode::cupti: {
      const std::int64_t now = detail::host_now_ns();
      std::lock_guard lock(impl_->mu);
      if (impl_->cupti_offset_at == 0 || now - impl_->cupti_offset_at > kCalibrationAgeNs) {
        // The narrowest of a few brackets: the least disturbed by preemption.
        std::int64_t best_width = std::numeric_limits<std::int64_t>::max();
        for (int i = 0; i < kClockBrackets; ++i) {
          const std::int64_t before = detail::host_now_ns();
          std::uint64_t cupti_now = 0;
          if (cuptiGetTimestamp(&cupti_now) != CUPTI_SUCCESS) break;
          const std::int64_t after = detail::host_now_ns();
          if (after - before < best_width) {
            best_width = after - before;
            impl_->cupti_offset_ns = static_cast<std::int64_t>(cupti_now) - (before + (after - before) / 2);
          }
        }
        impl_->cupti_offset_at = now;
      }
      return device_ns - impl_->cupti_offset_ns;
    }
    case Mode::events: {
      std::lock_guard lock(impl_->mu);
      auto it = impl_->reference_host_ns.find(device);
      return it == impl_->reference_host_ns.end() ? device_ns : it->second + device_ns;
    }
    case Mode::off:
      break;
  }
  return device_ns;
}

void Timing::maintain() {
  if (mode_ != Mode::cupti) return;
  if (impl_->retired_waiting.load(std::memory_order_relaxed) < kFlushWhenRetired) return;
  std::unique_lock flush_lock(impl_->flush_mu, std::try_to_lock);
  if (flush_lock.owns_lock()) flush_locked();
}

void Timing::flush_locked() {
  std::uint64_t before;
  {
    std::lock_guard lock(impl_->mu);
    before = ++impl_->epoch;
  }
  // Delivers every record of work that has finished; the buffers come back through
  // buffer_completed, on this thread or CUPTI's.
  cuptiActivityFlushAll(0);
  std::lock_guard lock(impl_->mu);
  impl_->finalize(before);
}

}  // namespace eventide::backends::cuda
