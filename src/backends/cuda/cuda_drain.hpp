// DeviceDrain: synchronize(device) on a GPU covers all work on the device, by anyone, as
// torch.cuda.synchronize() does: other libraries' streams (PyTorch's pool streams are
// non-blocking: a marker on the legacy default stream does not cover them), not only
// eventide's. CUDA has one call for that, cudaDeviceSynchronize, and it blocks; so a thread of
// the device's own makes it, and the callers wait on a host timeline it advances: without a busy
// loop, with a timeout, interruptible from Python.
//
// Tickets: each request takes the next number (point()); the thread, woken, takes the highest
// number asked so far, runs cudaDeviceSynchronize, and then advances the timeline to that
// number. A synchronize that began after a request was taken covers everything queued before
// it, so the request is satisfied by it; requests made meanwhile share the next one.
//
// Failure: a sticky error that cudaDeviceSynchronize returns breaks the device
// (CudaDevice::mark_broken): synchronize then raises it as a DeviceError. A GPU that never
// finishes (a kernel spinning for good) keeps the thread in the call: the callers' waits time
// out or are interrupted, and at exit the thread is left to the process's end.
//
// Capture: the thread runs in cudaStreamCaptureModeRelaxed, so that its call does not break
// another thread's global-mode capture (torch.cuda.graph), which has nothing running anyway.
//
// Thread-safety: every member, from any thread. Lifetime: with its device; stop() at exit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/backend.hpp"
#include "core/runtime_thread.hpp"
#include "core/timeline.hpp"

namespace eventide::backends::cuda {

class CudaDevice;

class DeviceDrain {
 public:
  explicit DeviceDrain(CudaDevice& device);
  DeviceDrain(const DeviceDrain&) = delete;
  DeviceDrain& operator=(const DeviceDrain&) = delete;

  // A point that passes once all work queued on the device before this call has finished.
  // Starts the thread at the first call. StateError after stop().
  detail::DevicePoint point();
  // Process exit: the thread ends after its call in flight, waited for until `deadline`.
  void stop(detail::Clock::time_point deadline) noexcept;

 private:
  void run() noexcept;

  CudaDevice& device_;
  const detail::Ref<detail::Timeline> timeline_;
  std::mutex mu_;  // a leaf: nothing is called under it
  std::condition_variable wake_;
  std::uint64_t requested_ = 0;  // under mu_
  bool stop_ = false;            // under mu_
  detail::RuntimeThread thread_;  // under mu_ (started by the first point())
};

}  // namespace eventide::backends::cuda
