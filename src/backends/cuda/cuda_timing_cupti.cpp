// The CUPTI mode of the CUDA timing (cuda_timing_modes.hpp, the default): CUPTI's activity
// records carry each kernel's, copy's and memset's own start and end on the GPU, tied to the
// op whose Scope made the launching call (cuda_timing.hpp says how).
//
// Markers have no records: a marker's CUDA event is measured from an anchor, an event whose
// time on CUPTI's clock is known by calibration (calibrate(), below). CUPTI's clock is put on
// the host's by an offset measured now and then (the narrowest of a few brackets).
#include <cupti.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_timing_modes.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::Ref;
using detail::Work;

constexpr std::size_t kBufferSize = std::size_t{4} << 20;
// CUPTI wants its activity buffers aligned to this many bytes.
constexpr std::size_t kBufferAlignment = 8;
// CUPTI's clock against the host's: the narrowest of this many brackets.
constexpr int kClockBrackets = 8;
// A calibration: the stream is held busy this long by a spinning kernel, so that what the host
// queues behind it (two timed one-element kernels around the anchor's event) runs back to back.
constexpr std::int64_t kCalibrationSpinNs = 50'000;
// The anchor is off by half the two kernels' gap at most. On an H200 that gap was 2.4-2.7 µs in
// a busy process, 7-19 µs after the GPU idled (lower clocks); a gap wider than this is tried
// again (the host may have been slower than the spin, or another process's work fell in it),
// this many times at most, and the narrowest is kept. Each try costs a flush of CUPTI's buffers.
constexpr std::int64_t kCalibrationGapNs = 4'000;
constexpr int kCalibrationTries = 4;
// Device memory for the calibration's kernels: the one-element kernels' word, then the
// spinning kernel's two stamps.
constexpr std::size_t kCalibrationScratchBytes = 64;
constexpr std::size_t kCalibrationStampsOffset = 16;
// The watcher flushes CUPTI's buffers once this many finished ops wait for their records.
constexpr std::size_t kFlushWhenRetired = 1024;
// Markers measured from an anchor more than this far away (float milliseconds: 60 ns steps at
// one second) make a new anchor, if the anchor is older than the second limit.
constexpr float kAnchorReachMs = 1000.0f;
constexpr std::int64_t kAnchorAgeNs = 1'000'000'000;
// CUPTI's clock against the host's: measured again when the last measure is this old, so
// that a long process follows a clock that is stepped or drifts.
constexpr std::int64_t kCalibrationAgeNs = 10'000'000'000;

const char* cupti_text(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

// The record keeping, also reached by CUPTI's C callbacks.
struct Records {
  struct Entry {
    Ref<Work> work;
    std::vector<std::uint32_t> correlations;
    std::uint64_t retired_epoch = 0;  // 0: still running
  };

  detail::RuntimeMutex mu;
  std::unordered_map<std::uint64_t, Entry> entries;  // by our correlation id
  std::unordered_map<const Work*, std::uint64_t> ids;
  std::unordered_map<std::uint32_t, std::uint64_t> by_correlation;  // CUPTI's id -> ours
  // Activity records of no op's launch seen so far (other code's work, in practice).
  struct Orphan {
    std::uint64_t start = 0, end = 0;
    std::uint64_t epoch = 0;  // when it was delivered
  };
  std::unordered_map<std::uint32_t, Orphan> orphans;
  std::uint64_t next_id = 1;
  std::atomic<int> open_scopes{0};  // Scopes whose launches are not tied yet
  std::uint64_t epoch = 1;
  // Retired entries not yet final. Changed under mu; read without it by maintain(), which the
  // watcher calls on every turn of its loop (taking mu there made op launches, which take it
  // too, queue behind a spinning watcher).
  std::atomic<std::size_t> retired_waiting{0};
  std::mutex flush_mu;

  // CUPTI's clock minus the host's, and when that was measured (host ns; 0: never). Under mu.
  std::int64_t cupti_offset_ns = 0;
  std::int64_t cupti_offset_at = 0;

  // `what` names the record (a kernel's name), for an op that keeps its parts (a graph
  // replay's, while a profiler records); null for a record without one.
  void merge(std::uint64_t id, std::uint64_t start, std::uint64_t end, const char* what = nullptr) {
    auto it = entries.find(id);
    if (it == entries.end()) return;
    Work& work = *it->second.work;
    work.merge_times(static_cast<std::int64_t>(start), static_cast<std::int64_t>(end));
    if (what && work.keeps_parts()) [[unlikely]] {
      work.add_part(short_kernel_name(what), static_cast<std::int64_t>(start), static_cast<std::int64_t>(end));
    }
  }

  // Ops' launching calls, noted by closing Scopes: the launching threads take only this
  // lock, never mu, which record delivery and finalize hold for long stretches (a launch
  // that waited there paid for it). fold_pending() moves them into the maps, under mu.
  struct Pending {
    Ref<Work> work;
    std::size_t first = 0;  // its correlation ids: pending_correlations[first, first + count)
    std::size_t count = 0;
  };
  detail::RuntimeMutex pending_mu;
  std::vector<Pending> pending;
  std::vector<std::uint32_t> pending_correlations;
  std::vector<Pending> folding;  // under mu: swapped with the above, their room kept
  std::vector<std::uint32_t> folding_correlations;

  // Notes the op's launching calls (a Scope closing). An op whose calls cannot be noted (out
  // of memory) is left untimed.
  void note(Work& work, std::span<const std::uint32_t> correlations) noexcept {
    try {
      std::lock_guard lock(pending_mu);
      const std::size_t first = pending_correlations.size();
      pending_correlations.insert(pending_correlations.end(), correlations.begin(), correlations.end());
      try {
        pending.push_back(Pending{Ref<Work>(&work), first, correlations.size()});
      } catch (...) {
        pending_correlations.resize(first);
      }
    } catch (...) {
    }
  }

  // Under mu: the noted ops get their entries and their calls' correlations.
  void fold_pending() noexcept {
    {
      std::lock_guard lock(pending_mu);
      pending.swap(folding);
      pending_correlations.swap(folding_correlations);
    }
    for (Pending& p : folding) {
      try {
        const std::uint64_t id = next_id++;
        Entry& e = entries[id];
        e.work = std::move(p.work);
        ids[e.work.get()] = id;
        for (std::size_t i = p.first; i < p.first + p.count; ++i) launched(id, folding_correlations[i]);
      } catch (...) {
        // Out of memory: the calls not tied lose their time (the op's is partial or unknown).
      }
    }
    folding.clear();
    folding_correlations.clear();
  }

  // The launching call `correlation` (CUPTI's id) was made for the op `id`. Under mu.
  void launched(std::uint64_t id, std::uint32_t correlation) {
    auto it = entries.find(id);
    if (it == entries.end()) return;
    it->second.correlations.push_back(correlation);
    by_correlation[correlation] = id;
    if (auto o = orphans.find(correlation); o != orphans.end()) {
      merge(id, o->second.start, o->second.end);
      orphans.erase(o);
    }
  }

  // A record (buffer_completed, under mu, after fold_pending).
  void take(CUpti_Activity* rec) {
    std::uint32_t correlation = 0;
    std::uint64_t start = 0, end = 0;
    const char* what = nullptr;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* r = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        what = r->name;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* r = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        what = "memcpy";
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        auto* r = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(rec);
        what = "memcpy";
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* r = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        what = "memset";
        correlation = r->correlationId;
        start = r->start;
        end = r->end;
        break;
      }
      default:
        return;
    }
    if (auto it = by_correlation.find(correlation); it != by_correlation.end()) {
      merge(it->second, start, end, what);
    } else {
      Orphan& o = orphans.try_emplace(correlation, Orphan{start, end, epoch}).first->second;
      o.start = std::min(o.start, start);
      o.end = std::max(o.end, end);
    }
  }

  // Per device, a CUDA event whose time on CUPTI's clock is known, that markers'
  // events are measured from (cudaEventElapsedTime, exact to float precision within a second
  // or so: hence made again when the one in use is older than that). Under calibration_mu.
  struct Anchor {
    cudaEvent_t event = nullptr;
    cudaEvent_t trial = nullptr;  // a calibration's attempt; swapped with `event` if it is better
    std::int64_t cupti_ns = 0;
    std::int64_t made_host_ns = 0;
    cudaStream_t stream = nullptr;
    void* scratch = nullptr;
  };
  std::mutex calibration_mu;
  std::unordered_map<int, Anchor> anchors;

  // Makes final the entries that retired before `before`. Under mu.
  void finalize(std::uint64_t before) {
    // Read before the fold: a Scope that closed before this read has noted its calls, and the
    // fold ties the records of those calls kept as orphans.
    const bool no_scope_open = open_scopes.load() == 0;
    fold_pending();
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
    // Records of no op's launch belong to other code's launches, unless an op's launch is
    // still being tied to its calls (a Scope open on some thread): then the records of this
    // flush may be its own. Older ones cannot be (a scope lasts one launch).
    if (no_scope_open) {
      orphans.clear();
    } else {
      std::erase_if(orphans, [&](const auto& o) { return o.second.epoch + 1 < before; });
    }
  }
};

std::atomic<Records*> g_impl{nullptr};  // for CUPTI's C callbacks (its buffer thread reads it)
std::atomic<bool> g_records_wanted{false};  // CUPTI mode is in use: records are read

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *size = kBufferSize;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferSize));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  // Called by CUPTI (C): nothing may escape. A record that cannot be kept (out of memory)
  // is lost: its op's time is then partial or unknown, never wrong about completion.
  Records* impl = g_impl.load(std::memory_order_acquire);
  if (impl && g_records_wanted.load(std::memory_order_acquire) && valid > 0) {
    std::lock_guard lock(impl->mu);
    impl->fold_pending();  // the ops launched so far own their records
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      try {
        impl->take(rec);
      } catch (...) {
      }
    }
  }
  std::free(buffer);
}

// Whether a Scope is open on this thread, and the correlation ids of the
// launching calls made in it so far: CUPTI's callback notes them here, without a lock (it runs
// inside CUDA's call, where taking the lock that CUPTI's buffer callback takes could
// deadlock), and the Scope ties them to the op when it closes.
thread_local bool t_scope_open = false;
thread_local std::vector<std::uint32_t> t_correlations;

void CUPTIAPI api_entered(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  // Called by CUPTI (C): nothing may escape. A correlation that cannot be kept (out of
  // memory) loses that launch's time, never more.
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (!t_scope_open || info->callbackSite != CUPTI_API_ENTER) return;
  try {
    t_correlations.push_back(info->correlationId);
  } catch (...) {
  }
}

// Whether CUDA's call `name` puts work on the GPU that CUPTI records (kernels, copies, sets).
bool launches_work(const char* name) {
  // (A host function launched into a stream has no record.)
  if (std::strstr(name, "HostFunc") != nullptr) return false;
  for (const char* prefix : {"cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch", "cudaLaunch",
                             "cudaMemcpy", "cudaMemset", "cudaGraphLaunch"}) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

constexpr CUpti_ActivityKind kRecordedKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                 CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};

// Starts CUPTI's part of the timing; on failure, leaves nothing of it running and says why.
std::string start_cupti() {
  auto fail = [](const char* call, CUptiResult r) { return std::string(call) + ": " + cupti_text(r); };
  // Which op a record belongs to: a callback on the calls that launch work only, by name in
  // both API domains (under CUDA 13 a <<<>>> launch shows as the driver's cuLaunchKernel,
  // cuBLASLt's as cuLaunchKernelEx). Every other call runs untouched: recording all API
  // calls, which external correlation ids need, made each CUDA call of the process slower
  // (cudaGetDevice + cudaSetDevice 1.1 µs instead of 0.1 on an H200). CUPTI has one
  // subscriber per process: under a profiler that holds it, this fails first, with the
  // profiler's name, and eventide times with event pairs.
  CUpti_SubscriberHandle subscriber = nullptr;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "eventide op timing";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof holder;
  if (CUptiResult r = cuptiSubscribe_v2(&subscriber, api_entered, nullptr, &params); r != CUPTI_SUCCESS) {
    std::string why = fail("cuptiSubscribe_v2", r);
    if (holder[0] != '\0') why += std::string(" (held by ") + holder + ")";
    return why;
  }
  std::string why;
  int enabled = 0;
  struct DomainRange {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId size;
  };
  for (DomainRange d : {DomainRange{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE},
                        DomainRange{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE}}) {
    for (CUpti_CallbackId cbid = 1; cbid < d.size && why.empty(); ++cbid) {
      const char* name = nullptr;
      if (cuptiGetCallbackName(d.domain, cbid, &name) != CUPTI_SUCCESS || !name || !launches_work(name)) continue;
      if (CUptiResult r = cuptiEnableCallback(1, subscriber, d.domain, cbid); r != CUPTI_SUCCESS) {
        why = fail("cuptiEnableCallback", r);
      }
      ++enabled;
    }
  }
  if (why.empty() && enabled == 0) why = "cuptiGetCallbackName: no launching call found";
  if (why.empty()) {
    if (CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
      why = fail("cuptiActivityRegisterCallbacks", r);
    }
  }
  std::size_t kinds_on = 0;
  for (; why.empty() && kinds_on < std::size(kRecordedKinds); ++kinds_on) {
    if (CUptiResult r = cuptiActivityEnable(kRecordedKinds[kinds_on]); r != CUPTI_SUCCESS) {
      why = fail("cuptiActivityEnable", r);
      break;
    }
  }
  if (!why.empty()) {
    for (std::size_t k = 0; k < kinds_on; ++k) cuptiActivityDisable(kRecordedKinds[k]);
    cuptiUnsubscribe(subscriber);
  }
  return why;
}

Records::Anchor* calibrate(Timing& timing, Records& impl, int device) {
  // The anchor is an event put on CUPTI's clock. On a private stream held busy by a spinning
  // kernel: a one-element kernel that CUPTI times, the event, another such kernel. Stream
  // order puts the event after the first kernel's end and before the second's start, so it is
  // placed halfway between them: off by half their gap at most (about half a microsecond),
  // whatever the host's pace, since all three were queued while the stream was busy.
  // (Bracketing one kernel by two events on an idle stream and splitting the time outside it
  // evenly was wrong by half the difference between the host's launch, which falls before
  // the kernel only, and the GPU's latency after it: markers read up to 13 µs early on an
  // H200 once launches got cheaper.)
  Records::Anchor& a = impl.anchors[device];
  DeviceScope scope(device, std::nothrow);
  if (!scope.ok()) return nullptr;
  if (!a.stream && cudaStreamCreateWithFlags(&a.stream, cudaStreamNonBlocking) != cudaSuccess) {
    return nullptr;
  }
  if (!a.event && (cudaEventCreate(&a.event) != cudaSuccess || cudaEventCreate(&a.trial) != cudaSuccess ||
                   cudaMalloc(&a.scratch, kCalibrationScratchBytes) != cudaSuccess)) {
    (void)cudaGetLastError();
    return nullptr;
  }
  auto* stamps = reinterpret_cast<unsigned long long*>(static_cast<char*>(a.scratch) + kCalibrationStampsOffset);
  auto timeline = detail::make_ref<detail::Timeline>("cuda timing calibration");
  std::optional<std::int64_t> best_gap;
  std::int64_t best_anchor = 0;
  bool ok = true;
  for (int attempt = 0; ok && attempt < kCalibrationTries; ++attempt) {
    Ref<Work> before = detail::make_ref<Work>(timeline, "calibration", detail::WorkKind::op);
    Ref<Work> after = detail::make_ref<Work>(timeline, "calibration", detail::WorkKind::op);
    auto timed_fill = [&](Work& probe) {
      Timing::Scope scope(timing, probe, a.stream);
      kernels::fill(a.scratch, 1, DType::f32, 0.0, a.stream);
    };
    try {
      kernels::spin(kCalibrationSpinNs, stamps, a.stream);
      timed_fill(*before);
      ok = cudaEventRecord(a.trial, a.stream) == cudaSuccess;
      if (ok) timed_fill(*after);
    } catch (...) {
      ok = false;
    }
    ok = cudaStreamSynchronize(a.stream) == cudaSuccess && ok;
    Work* probes[] = {before.get(), after.get()};
    timing.await_all(probes);  // retires them and flushes: CUPTI's records of the kernels
    ok = ok && before->has_times() && after->has_times();
    if (!ok) break;
    const std::int64_t gap = after->start_ns() - before->end_ns();
    if (gap >= 0 && (!best_gap || gap < *best_gap)) {
      best_gap = gap;
      best_anchor = before->end_ns() + gap / 2;
      std::swap(a.event, a.trial);  // the event this attempt placed
    }
    if (best_gap && *best_gap <= kCalibrationGapNs) break;
  }
  if (!ok || !best_gap) {
    (void)cudaGetLastError();
    a.cupti_ns = 0;
    return nullptr;
  }
  a.cupti_ns = best_anchor;
  a.made_host_ns = detail::host_now_ns();
  return &a;
}

// CUPTI mode, under impl.calibration_mu: the device's anchor, measured now if it has none.
Records::Anchor* calibrated_anchor(Timing& timing, Records& impl, int device) {
  auto it = impl.anchors.find(device);
  if (it != impl.anchors.end() && it->second.cupti_ns != 0) return &it->second;
  return calibrate(timing, impl, device);
}

class CuptiTiming final : public TimingMode {
 public:
  CuptiTiming() { g_impl.store(&r_, std::memory_order_release); }

  Timing::Mode mode() const noexcept override { return Timing::Mode::cupti; }

  void open(Timing::ScopeState& state, Work&, cudaStream_t) override {
    // The op's entry is made when the scope closes, with the calls it made (none: no entry,
    // and retired() finds it untimed).
    state.previous_open = t_scope_open;
    state.first = t_correlations.size();
    t_scope_open = true;
    r_.open_scopes.fetch_add(1);
  }

  void close(Timing::ScopeState& state, Work& work, cudaStream_t) noexcept override {
    if (t_correlations.size() > state.first) {
      r_.note(work, std::span<const std::uint32_t>(t_correlations).subspan(state.first));
    }
    t_correlations.resize(state.first);
    t_scope_open = state.previous_open;
    r_.open_scopes.fetch_sub(1);
  }

  void retired(Work& work) noexcept override {
    std::lock_guard lock(r_.mu);
    r_.fold_pending();  // its launches may not be folded yet
    auto id = r_.ids.find(&work);
    if (id == r_.ids.end()) {
      Timing::retired_untimed(work);  // launched nothing timed (a wait)
      return;
    }
    auto it = r_.entries.find(id->second);
    if (it == r_.entries.end() || it->second.retired_epoch != 0) return;
    it->second.retired_epoch = r_.epoch;
    r_.retired_waiting.fetch_add(1, std::memory_order_relaxed);
  }

  void flush_until_known(std::span<Work* const> works) override {
    std::lock_guard flush_lock(r_.flush_mu);
    // (Another thread's flush may have covered them; a flush makes final what retired before
    // it.)
    for (Work* w : works) {
      while (!w->timing_known()) flush_locked();
    }
  }

  std::optional<std::int64_t> marker_ns(Timing& timing, const CudaStamp& stamp) override {
    std::lock_guard lock(r_.calibration_mu);
    Records::Anchor* anchor = calibrated_anchor(timing, r_, stamp.device());
    std::optional<float> ms = anchor ? stamp.ms_since(anchor->event) : std::nullopt;
    if (ms && std::abs(*ms) > kAnchorReachMs && detail::host_now_ns() - anchor->made_host_ns > kAnchorAgeNs) {
      // Far from the anchor: float milliseconds lose precision; measure from a new one.
      anchor = calibrate(timing, r_, stamp.device());
      ms = anchor ? stamp.ms_since(anchor->event) : std::nullopt;
    }
    if (!ms) return std::nullopt;
    return anchor->cupti_ns + static_cast<std::int64_t>(static_cast<double>(*ms) * kNsPerMs);
  }

  std::int64_t to_host_ns(int, std::int64_t device_ns) noexcept override {
    const std::int64_t now = detail::host_now_ns();
    std::lock_guard lock(r_.mu);
    if (r_.cupti_offset_at == 0 || now - r_.cupti_offset_at > kCalibrationAgeNs) {
      // The narrowest of a few brackets: the least disturbed by preemption.
      std::int64_t best_width = std::numeric_limits<std::int64_t>::max();
      for (int i = 0; i < kClockBrackets; ++i) {
        const std::int64_t before = detail::host_now_ns();
        std::uint64_t cupti_now = 0;
        if (cuptiGetTimestamp(&cupti_now) != CUPTI_SUCCESS) break;
        const std::int64_t after = detail::host_now_ns();
        if (after - before < best_width) {
          best_width = after - before;
          r_.cupti_offset_ns = static_cast<std::int64_t>(cupti_now) - (before + (after - before) / 2);
        }
      }
      r_.cupti_offset_at = now;
    }
    return device_ns - r_.cupti_offset_ns;
  }

  void maintain() override {
    if (r_.retired_waiting.load(std::memory_order_relaxed) < kFlushWhenRetired) return;
    std::unique_lock flush_lock(r_.flush_mu, std::try_to_lock);
    if (flush_lock.owns_lock()) flush_locked();
  }

 private:
  // Under r_.flush_mu.
  void flush_locked() {
    std::uint64_t before;
    {
      std::lock_guard lock(r_.mu);
      before = ++r_.epoch;
    }
    // Delivers every record of work that has finished; the buffers come back through
    // buffer_completed, on this thread or CUPTI's.
    cuptiActivityFlushAll(0);
    std::lock_guard lock(r_.mu);
    r_.finalize(before);
  }

  Records r_;
};

}  // namespace

std::unique_ptr<TimingMode> make_cupti_timing(std::string& why_not) {
  // Never destroyed once started (as Timing): CUPTI may call back during exit.
  auto mode = std::make_unique<CuptiTiming>();
  why_not = start_cupti();
  if (!why_not.empty()) {
    g_impl.store(nullptr, std::memory_order_release);
    return nullptr;
  }
  g_records_wanted.store(true, std::memory_order_release);
  // CUPTI sets up its buffers with its first records, which takes a while: a call and a flush
  // here, so that the first op or marker timed does not carry it.
  int device = 0;
  (void)cudaGetDevice(&device);
  cuptiActivityFlushAll(0);
  return mode;
}

}  // namespace eventide::backends::cuda
