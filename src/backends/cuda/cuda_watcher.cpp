// The CUDA device's watcher hooks (cuda_watcher.hpp).
#include "backends/cuda/cuda_watcher.hpp"

#include <cuda_runtime.h>

#include <memory>
#include <utility>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

void Watcher::on_thread_start() noexcept {
  // Its queries must not invalidate another thread's global-mode capture (torch.cuda.graph).
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
  // The device's start-up (CUPTI, then eventide's kernels into the context), off the callers'
  // threads and off this one, which meanwhile retires what finishes (markers, waits: work
  // with a body is held until the start-up is over).
  device_.begin_start();
  cudaSetDevice(device_.device().index());
}

void Watcher::maintain() noexcept {
  try {
    if (Timing* timing = Timing::if_started()) timing->maintain();
  } catch (...) {
    // Nothing there is expected to throw; the watcher's loop must not end the process.
  }
}

void Watcher::check_health() noexcept {
  cudaError_t failed = cudaSuccess;
  std::shared_ptr<CudaStream> on;
  for_each_watched([&](detail::DeviceStream& s) {
    if (failed != cudaSuccess) return;
    auto& stream = static_cast<CudaStream&>(s);  // (a CUDA device's streams are CudaStreams)
    const cudaError_t st = stream.query_native();
    if (st != cudaSuccess && st != cudaErrorNotReady) {
      failed = st;
      on = std::static_pointer_cast<CudaStream>(stream.shared_from_this());
    }
  });
  if (failed == cudaSuccess) return;
  std::exception_ptr error;
  try {
    error = std::make_exception_ptr(DeviceError(
        "cudaStreamQuery reports " + describe(failed) + " on " + on->name(), "cudaStreamQuery", failed));
  } catch (...) {
    error = std::current_exception();  // out of memory for the message: the device fails all the same
  }
  device_.mark_broken(std::move(error));
}

}  // namespace eventide::backends::cuda
