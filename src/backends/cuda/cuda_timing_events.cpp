// The events mode of the CUDA timing (cuda_timing_modes.hpp): a pair of CUDA events around
// each op's launch, read once the op has retired. It includes the launch gap on an idle
// stream (cuda_timing.hpp); it serves where CUPTI cannot (under a profiler that holds it).
//
// Clock: nanoseconds since a reference event recorded on the device at its first timed op;
// to_host_ns adds the host time at which that event completed.
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_timing_modes.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::Ref;
using detail::Work;

// A reference event that completed within this long was recorded on an idle stream.
constexpr std::int64_t kReferenceIdleNs = 100'000;

class EventTiming final : public TimingMode {
 public:
  Timing::Mode mode() const noexcept override { return Timing::Mode::events; }

  void open(Timing::ScopeState& state, Work& work, cudaStream_t stream) override {
    cudaEvent_t start = nullptr;
    {
      std::lock_guard lock(mu_);
      state.id = next_id_++;
      Entry& e = entries_[state.id];
      e.work = Ref<Work>(&work);
      ids_[&work] = state.id;
      cudaGetDevice(&e.device);
      reference_of(e.device);
      for (cudaEvent_t* ev : {&e.start, &e.end}) {
        if (!spare_events_.empty()) {
          *ev = spare_events_.back();
          spare_events_.pop_back();
        } else {
          cudaEventCreate(ev);
        }
      }
      start = e.start;
    }
    cudaEventRecord(start, stream);
  }

  void close(Timing::ScopeState& state, Work&, cudaStream_t stream) noexcept override {
    cudaEvent_t end = nullptr;
    {
      std::lock_guard lock(mu_);
      // find, not []: a destructor must not insert (allocate).
      if (auto it = entries_.find(state.id); it != entries_.end()) end = it->second.end;
    }
    if (end) cudaEventRecord(end, stream);
  }

  void retired(Work& work) noexcept override {
    std::lock_guard lock(mu_);
    auto id = ids_.find(&work);
    if (id == ids_.end()) {
      Timing::retired_untimed(work);  // launched nothing timed (a wait)
      return;
    }
    auto it = entries_.find(id->second);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    // The work has finished, so its events have completed.
    float start_ms = 0, end_ms = 0;
    auto ref_it = reference_.find(e.device);  // not []: nothing here may allocate
    cudaEvent_t ref = ref_it == reference_.end() ? nullptr : ref_it->second;
    if (ref && cudaEventElapsedTime(&start_ms, ref, e.start) == cudaSuccess &&
        cudaEventElapsedTime(&end_ms, ref, e.end) == cudaSuccess) {
      work.merge_times(static_cast<std::int64_t>(start_ms * kNsPerMs),
                       static_cast<std::int64_t>(end_ms * kNsPerMs));
    }
    for (cudaEvent_t ev : {e.start, e.end}) {
      if (!ev) continue;
      try {
        spare_events_.push_back(ev);
      } catch (...) {
        cudaEventDestroy(ev);  // out of memory: not kept for reuse
      }
    }
    work.finish_timing();
    ids_.erase(&work);
    entries_.erase(it);
  }

  std::optional<std::int64_t> marker_ns(Timing&, const CudaStamp& stamp) override {
    std::lock_guard lock(mu_);
    const std::optional<float> ms = stamp.ms_since(reference_of(stamp.device()));
    if (!ms) return std::nullopt;
    return static_cast<std::int64_t>(static_cast<double>(*ms) * kNsPerMs);
  }

  std::int64_t to_host_ns(int device, std::int64_t device_ns) noexcept override {
    std::lock_guard lock(mu_);
    auto it = reference_host_ns_.find(device);
    return it == reference_host_ns_.end() ? device_ns : it->second + device_ns;
  }

 private:
  struct Entry {
    Ref<Work> work;
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    int device = 0;
  };

  // The device's reference event, recorded (and its host time measured) on first use; null
  // if it could not be. Under mu_.
  cudaEvent_t reference_of(int device) {
    if (auto it = reference_.find(device); it != reference_.end()) return it->second;
    cudaEvent_t ref;
    if (cudaEventCreate(&ref) != cudaSuccess) return nullptr;
    const std::int64_t before = detail::host_now_ns();
    if (cudaEventRecord(ref, nullptr) != cudaSuccess) {
      cudaEventDestroy(ref);
      return nullptr;
    }
    cudaEventSynchronize(ref);
    const std::int64_t after = detail::host_now_ns();
    reference_[device] = ref;
    // It completed between the two: on an idle stream at once (the middle is within a few
    // microseconds); behind other work (the legacy stream is shared), just before the
    // synchronize returned.
    reference_host_ns_[device] = after - before < kReferenceIdleNs ? before + (after - before) / 2 : after;
    return ref;
  }

  detail::RuntimeMutex mu_;
  std::unordered_map<std::uint64_t, Entry> entries_;  // by our id (ScopeState::id)
  std::unordered_map<const Work*, std::uint64_t> ids_;
  std::uint64_t next_id_ = 1;
  // Per device, an event recorded at start-up that times are measured from, and the host
  // time (host_now_ns) at which it completed.
  std::unordered_map<int, cudaEvent_t> reference_;
  std::unordered_map<int, std::int64_t> reference_host_ns_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace

std::unique_ptr<TimingMode> make_event_timing() { return std::make_unique<EventTiming>(); }

}  // namespace eventide::backends::cuda
