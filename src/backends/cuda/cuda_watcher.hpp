// The CUDA device's watcher: the core's device watcher (core/device_watcher.hpp: the list of
// streams with work in flight or held, the turns that release and retire their work, the
// spin and back-off, the fork pause) with what a GPU adds: its thread starts the device
// (CUPTI, the kernels' code: CudaDevice::begin_start) in relaxed capture mode, so that its
// queries never invalidate another thread's capture (torch.cuda.graph); each turn keeps the
// timing up (Timing::maintain); and when nothing has moved for a while, a sticky error on a
// stream (cudaStreamQuery: a kernel that trapped) marks the device broken, which fails
// everything in flight and held.
//
// Thread-safety: as DeviceWatcher's.
#pragma once

#include "core/device_watcher.hpp"

namespace eventide::backends::cuda {

class CudaDevice;

class Watcher final : public detail::DeviceWatcher {
 public:
  explicit Watcher(CudaDevice& device) noexcept : DeviceWatcher("eventide-cuda"), device_(device) {}
  // The thread calls this object's hooks: it is stopped first (the runtime, which owns the
  // devices, lives until the process exits, so this is for completeness).
  ~Watcher() override { stop(detail::Clock::now() + std::chrono::seconds(5)); }

 protected:
  void on_thread_start() noexcept override;
  void maintain() noexcept override;
  void check_health() noexcept override;

 private:
  CudaDevice& device_;
};

}  // namespace eventide::backends::cuda
