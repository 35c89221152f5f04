// Device time of CUDA ops, without launch gaps.
//
// A pair of CUDA events around a kernel reads the time from when the GPU reached the first
// event to when it reached the second: when the stream was idle, that includes the host's
// launch of the kernel (about 6 µs too long on an H200 for a 10 µs kernel).
// CUPTI's activity records carry each kernel's, copy's and memset's own start and end on the
// GPU, and the correlation id of the call that launched it. While an op is launched (Scope),
// CUPTI's callback on the launching calls (cuLaunchKernel, cuMemcpyAsync, ...; no other call
// is traced) ties each call's correlation id to the op, and the records are folded into the
// op's Work as they arrive: its time is from the start of its first activity to the end of
// its last.
//
// Records arrive in buffers, some time after the work: a Work's time is *known* once a flush
// (cuptiActivityFlushAll) that began after the work finished has delivered them. await()
// flushes when a caller needs a time that is not known yet; ready times need no flush.
//
// Modes (EVENTIDE_CUDA_TIMING): "cupti" (default), "events" (CUDA event pairs: includes the
// launch gap, as described above; for processes where CUPTI is unavailable, e.g. under a
// profiler that holds it), "off" (time_elapsed of CUDA work is 0). The mode actually in use
// is in `eventide info`.
//
// Clocks: CUPTI's timestamps are on CUPTI's own clock (cuptiGetTimestamp); event-pair times
// are nanoseconds since a reference event recorded on the device at the first timed op.
// to_host_ns() puts either on the host's clock (host_now_ns), for the profiler: CUPTI's by
// an offset measured once (cuptiGetTimestamp between two host_now_ns(), the narrowest of a
// few tries), event pairs by the host time at which the reference event completed.
//
// Where the code is: each mode is a strategy of its own (cuda_timing_modes.hpp:
// cuda_timing_cupti.cpp, cuda_timing_events.cpp); this facade (cuda_timing.cpp) chooses one
// at its start and does what they share.
//
// Thread-safety: all members, from any thread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/work.hpp"

namespace eventide::backends::cuda {

class TimingMode;

class Timing {
 public:
  enum class Mode { cupti, events, off };

  // The process's timing (CUPTI is per process); starts CUPTI on first use. Starting CUPTI
  // waits until the device is idle (seen on the H200: behind another library's queued work,
  // for as long as that work runs), so the watcher thread makes the first call, before its
  // first CUDA call, and the callers' threads need it only for what the start-up holds
  // (CudaDevice::started).
  static Timing& get();
  // The timing once get() has returned somewhere, else null, without waiting for it: for the
  // watcher, which must not block behind CUPTI's start.
  static Timing* if_started() noexcept;

  Mode mode() const noexcept { return mode_; }
  // "CUPTI activity records", "CUDA event pairs (include launch gaps)", ...
  std::string describe() const;
  // describe() of the timing if it has started; else what it is starting as, without waiting
  // for the start (device_info must not wait behind other libraries' work).
  static std::string describe_without_waiting();
  // The text of `mode` (for events, with why CUPTI was not used, if it was tried).
  static std::string describe(Mode mode, const std::string& why_not_cupti);

  // What a mode keeps between a Scope's opening and its closing.
  struct ScopeState {
    std::uint64_t id = 0;  // events mode: the op's entry
    // CUPTI mode: whether a scope was open on this thread already, and where this one's
    // correlation ids begin in the thread's list.
    bool previous_open = false;
    std::size_t first = 0;
  };

  // Tags the CUDA work launched on this thread during its lifetime with `work`.
  class Scope {
   public:
    Scope(Timing& timing, detail::Work& work, cudaStream_t stream);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timing& timing_;
    detail::Work& work_;
    cudaStream_t stream_;
    ScopeState state_;
  };

  // A marker at the current end of `stream` (on `device`, current): a timed CUDA event
  // recorded there, as the marker's stamp; null with timing off. Throws DeviceError. Static:
  // it needs no CUPTI, so a marker is placed at once even while CUPTI starts.
  static detail::Ref<detail::Stamp> stamp(int device, cudaStream_t stream);

  // The work has finished on the GPU (the watcher retired it): its records are complete once
  // the next flush has run.
  void retired(detail::Work& work) noexcept;
  // retired() for a work that retires before the timing has started (if_started() null): it
  // launched nothing timed, since a timed launch needs get().
  static void retired_untimed(detail::Work& work) noexcept;
  // Blocks until the device time of `work` (finished) is known.
  void await(detail::Work& work);
  // The same for many works (finished), with one flush for all.
  void await_all(std::span<detail::Work* const> works);
  // A time of work on `device` (Work::start_ns, end_ns) on the host's clock.
  std::int64_t to_host_ns(int device, std::int64_t device_ns) noexcept;
  // Called by the watchers: flushes now and then so that the records of finished work that
  // nobody asked the time of do not pile up.
  void maintain();

  // In the child of a fork: CUDA does not work here, and the timing's locks may have been
  // held by a thread of the parent's; from now on a retired op is untimed, with no lock taken.
  // (Static: it must not start the timing where it had not started.)
  static void forget_after_fork() noexcept;

 private:
  // A finished marker's time from its stamp, on the timeline's clock.
  void time_marker(detail::Work& work);

  Timing();
  std::unique_ptr<TimingMode> impl_;  // the mode's strategy
  Mode mode_;
  std::string why_not_cupti_;  // why CUPTI is not in use, where it was tried
};

}  // namespace eventide::backends::cuda
