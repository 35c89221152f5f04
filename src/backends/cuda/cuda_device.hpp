// Per-device state of the CUDA backend, shared by the device's streams: its properties, its
// progress strategy (cuda_progress.hpp, chosen when the device is found), its watcher
// (cuda_watcher.hpp), its sticky failure, and its private transfer stream.
//
// State: working, then broken for good once a sticky error (or a fork) is seen
// (mark_broken): every later launch, wait and synchronize raises the failure. Stopped at
// process exit (stop()).
//
// Lifetime: a CudaDevice lives as long as its backend, which the runtime never frees; what
// must be destroyed through CUDA before the CUDA runtime is torn down (the transfer stream)
// is destroyed by stop(), in order, after the watcher has stopped.
//
// Thread-safety: every member, from any thread. Its lock guards only the failure, and is a
// leaf; broken() takes it only once the device has failed.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <exception>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>

#include "backends/cuda/cuda_drain.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cuda_progress.hpp"
#include "backends/cuda/cuda_watcher.hpp"
#include "core/device_stream.hpp"
#include "core/parker.hpp"
#include "core/runtime_lock.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// The device's private stream for copies whose caller waits for them (Kernels::download):
// made at first use, destroyed by shutdown() once no copy runs on it.
//
// A copy holds a Use for as long as it uses the stream (shared with other copies); shutdown()
// waits for the copies running until its deadline, then destroys the stream; if a copy is
// still running then (a GPU that does not answer), the stream is left to the process's end,
// never destroyed under a copy. A copy after shutdown gets a stream of its own, destroyed when
// its Use ends.
class TransferStream {
 public:
  explicit TransferStream(Device device) noexcept : device_(device) {}
  TransferStream(const TransferStream&) = delete;
  TransferStream& operator=(const TransferStream&) = delete;

  class Use {
   public:
    cudaStream_t get() const noexcept { return stream_; }

   private:
    friend class TransferStream;
    Use() = default;
    std::shared_lock<std::shared_timed_mutex> lock_;
    cudaStream_t stream_ = nullptr;
  };

  // The stream, made now if it does not exist yet, on the device, which must be current on
  // the calling thread (DeviceScope). DeviceError if it cannot be made.
  Use use();
  // Process exit: destroys the stream (Teardown::destroy) or leaves it to the process's end
  // (Teardown::leave: a failed device, on which the call could only fail) once the copies
  // using it have finished, waiting for them until `deadline`. Later uses copy on their
  // thread's per-thread default stream.
  enum class Teardown { destroy, leave };
  void shutdown(detail::Clock::time_point deadline, Teardown teardown) noexcept;

 private:
  const Device device_;
  std::shared_timed_mutex mu_;
  OwnedStream stream_;  // under mu_ (made under it exclusively)
  bool shut_down_ = false;  // under mu_
};

// The device as its streams' engine sees it (core/device_stream.hpp): its failure, its watcher.
class CudaDevice final : public detail::DeviceEngine {
 public:
  // Reads the device's properties and chooses its progress strategy. DeviceError.
  explicit CudaDevice(Device device);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  Device device() const noexcept { return device_; }
  const cudaDeviceProp& props() const noexcept { return props_; }
  // How its streams publish progress and wait for each other on the GPU.
  ProgressPublisher& progress() const noexcept { return *progress_; }
  Watcher& watcher() noexcept { return watcher_; }
  TransferStream& transfer() noexcept { return transfer_; }
  // synchronize(device)'s wait for everything on the device (cuda_drain.hpp).
  DeviceDrain& drain() noexcept { return drain_; }
  // {least, greatest} (cudaDeviceGetStreamPriorityRange), read when the device is found.
  std::pair<int, int> priority_range() const noexcept { return priority_range_; }

  // The device's sticky error once it has failed, else null.
  std::exception_ptr broken() const noexcept override;
  // Records a failure of the device (sticky error) and abandons all work in flight.
  void mark_broken(std::exception_ptr error) noexcept override;

  // Start-up without a drain: CUPTI's start (op timing) and the loading of eventide's kernels
  // into the context both wait until the device is idle, behind whatever other libraries have
  // queued (on the H200: 120-360 ms behind PyTorch's matmuls, with lazy and eager loading
  // alike). The watcher thread does both; until then work with a body is held on the host
  // like work behind a UserEvent (CudaStream::host_wait), markers are placed at once (their
  // stamps need neither), so that no call of the user's blocks behind other libraries' work.
  bool started() const noexcept { return started_work_->done(); }
  const detail::Dep& started_dep() const noexcept { return started_dep_; }
  // The watcher's first step: a thread of the device's own starts the timing, loads the
  // kernels, then releases what was held for it. Once; from the watcher thread.
  void begin_start() noexcept;
  // In the child of a fork: the start-up thread is not there.
  void forget_after_fork() noexcept { starter_.abandon(); }

  // Something to look at for the watcher (new work, a listener, held work to release).
  void wake() noexcept override { watcher_.wake(); }
  void demanded() noexcept override { watcher_.look_soon(); }
  void nudge() noexcept override { watcher_.nudge(); }
  // Puts a stream of this device (a CudaStream) on the watcher's list.
  void watch(std::shared_ptr<detail::DeviceStream> stream) noexcept override;
  // Process exit: stops the watcher, waiting for it until `deadline`, then destroys the
  // transfer stream (see TransferStream::shutdown).
  void stop(detail::Clock::time_point deadline) noexcept;

 private:
  const Device device_;
  cudaDeviceProp props_{};
  std::unique_ptr<ProgressPublisher> progress_;

  mutable detail::RuntimeMutex mu_;
  std::exception_ptr broken_;  // under mu_
  std::atomic<bool> is_broken_{false};  // broken_ is set: broken()'s look without mu_

  std::pair<int, int> priority_range_{0, 0};
  const detail::Ref<detail::Timeline> start_up_;
  const detail::Ref<detail::Work> started_work_;  // seq 1 on start_up_
  const detail::Dep started_dep_;
  // Runs start() (begin_start); joined by stop(). Set by the watcher thread before stop().
  detail::RuntimeThread starter_;
  void start() noexcept;

  Watcher watcher_{*this};
  TransferStream transfer_{device_};
  DeviceDrain drain_{*this};
};

}  // namespace eventide::backends::cuda
