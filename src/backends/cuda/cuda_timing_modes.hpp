// The timing modes of the CUDA backend (cuda_timing.hpp): one strategy per mode, as the
// progress strategies are (cuda_progress.hpp). Timing, the facade, holds the one chosen at its
// start and does what every mode shares: the markers' stamps, fork, waiting for a launch to
// end, handing each call to the mode.
//
//   CuptiTiming  (cuda_timing_cupti.cpp)   CUPTI's activity records of each op's kernels and
//                                          copies; markers measured from a calibrated anchor
//   EventTiming  (cuda_timing_events.cpp)  a pair of CUDA events around each op; markers and
//                                          ops measured from a reference event per device
//   the off mode (cuda_timing.cpp)         no time
//
// Thread-safety: every member, from any thread (each mode has its own locks). In a forked
// child the facade answers retired(), marker times and clocks itself; a Scope's open and
// close and maintain() still reach the mode (no CUDA work is launched or retired there).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backends/cuda/cuda_timing.hpp"
#include "core/work.hpp"

namespace eventide::backends::cuda {

// cudaEventElapsedTime's milliseconds to nanoseconds.
inline constexpr double kNsPerMs = 1e6;

// A marker's timed CUDA event (Timing::stamp); back to the facade's pool when the marker is
// gone.
class CudaStamp final : public detail::Stamp {
 public:
  CudaStamp(int device, cudaEvent_t event) noexcept : device_(device), event_(event) {}
  ~CudaStamp() override;
  std::optional<double> ns_until(const detail::Stamp& later) const noexcept override;
  int device() const noexcept { return device_; }
  cudaEvent_t event() const noexcept { return event_; }
  // Milliseconds from `from` to this stamp's event; nullopt if CUDA cannot say.
  std::optional<float> ms_since(cudaEvent_t from) const noexcept;

 private:
  const int device_;
  const cudaEvent_t event_;
};

class TimingMode {
 public:
  virtual ~TimingMode() = default;
  virtual Timing::Mode mode() const noexcept = 0;

  // A Scope opens and closes on the launching thread, around an op's launch on `stream`;
  // `state` is the mode's to keep between the two.
  virtual void open(Timing::ScopeState& state, detail::Work& work, cudaStream_t stream) {
    (void)state, (void)work, (void)stream;
  }
  virtual void close(Timing::ScopeState& state, detail::Work& work, cudaStream_t stream) noexcept {
    (void)state, (void)work, (void)stream;
  }
  // The op `work` (not a marker) has finished on the GPU: its time is known now, or once
  // flush_until_known() has run.
  virtual void retired(detail::Work& work) noexcept = 0;
  // Blocks until the times of `works` (retired) are known. Nothing to do where retired()
  // makes them known.
  virtual void flush_until_known(std::span<detail::Work* const> works) { (void)works; }
  // A finished marker's time on the mode's clock, from its stamp; nullopt if it cannot be
  // known. `timing` is the facade (a calibration times ops of its own).
  virtual std::optional<std::int64_t> marker_ns(Timing& timing, const CudaStamp& stamp) {
    (void)timing, (void)stamp;
    return std::nullopt;
  }
  // A time of work on `device` on the mode's clock, on the host's (host_now_ns).
  virtual std::int64_t to_host_ns(int device, std::int64_t device_ns) noexcept {
    (void)device;
    return device_ns;
  }
  // Called by the watchers on every turn.
  virtual void maintain() {}
};

// CUPTI's mode, started; null (with why in `why_not`) if CUPTI cannot be used here.
std::unique_ptr<TimingMode> make_cupti_timing(std::string& why_not);
std::unique_ptr<TimingMode> make_event_timing();

}  // namespace eventide::backends::cuda
