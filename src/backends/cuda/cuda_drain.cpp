#include "backends/cuda/cuda_drain.hpp"

#include <pthread.h>

#include <exception>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "core/work.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

DeviceDrain::DeviceDrain(CudaDevice& device)
    : device_(device),
      timeline_(detail::make_ref<detail::Timeline>(device.device().str() + " device-wide synchronize")) {}

detail::DevicePoint DeviceDrain::point() {
  std::uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    if (stop_) throw StateError("synchronize(" + device_.device().str() + "): the eventide runtime has shut down");
    if (!thread_.joinable()) thread_ = detail::RuntimeThread([this] { run(); });
    ticket = ++requested_;
  }
  wake_.notify_one();
  return detail::DevicePoint{timeline_, ticket};
}

void DeviceDrain::run() noexcept {
  pthread_setname_np(pthread_self(), "eventide-drain");
  cudaSetDevice(device_.device().index());
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
  std::uint64_t done = 0;
  for (;;) {
    std::uint64_t target;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || requested_ > done; });
      if (requested_ == done) return;  // stopping, nothing asked for
      target = requested_;
    }
    const cudaError_t st = device_.broken() ? cudaSuccess : cudaDeviceSynchronize();
    if (st != cudaSuccess) {
      std::exception_ptr error;
      try {
        error = std::make_exception_ptr(DeviceError(
            "cudaDeviceSynchronize failed (synchronize(" + device_.device().str() + ")): " + describe(st),
            "cudaDeviceSynchronize", st));
      } catch (...) {
        error = detail::out_of_memory_error();
      }
      device_.mark_broken(std::move(error));
    }
    done = target;
    timeline_->advance(target);
  }
}

void DeviceDrain::stop(detail::Clock::time_point deadline) noexcept {
  detail::RuntimeThread t;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  wake_.notify_all();
  // Still in its call at the deadline (a GPU that never finishes): left to the process's end,
  // and what it was asked for stays unpassed (never a synchronize that returns early). Joined,
  // it has served every request: it stops only once it has caught up.
  t.join_until(deadline);
}

}  // namespace eventide::backends::cuda
