#include "backends/cuda/cuda_device.hpp"

#include <pthread.h>

#include <cstdio>
#include <mutex>
#include <system_error>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

// --- TransferStream ----------------------------------------------------------------------

TransferStream::Use TransferStream::use() {
  const std::string what = "(transfers of " + device_.str() + ")";
  Use use;
  std::shared_lock lock(mu_);
  while (!stream_.get() && !shut_down_) {
    // Made under the exclusive lock, once; then used under the shared one like any copy.
    lock.unlock();
    {
      std::unique_lock exclusive(mu_);
      if (!stream_.get() && !shut_down_) stream_ = OwnedStream::create(device_, what);
    }
    lock.lock();
  }
  if (shut_down_) {
    // Process exit: the shared stream is gone (or left alone). The calling thread's per-thread
    // default stream needs nothing made or destroyed while CUDA itself may be tearing down.
    use.stream_ = cudaStreamPerThread;
    return use;
  }
  use.stream_ = stream_.get();
  use.lock_ = std::move(lock);
  return use;
}

void TransferStream::shutdown(detail::Clock::time_point deadline, Teardown teardown) noexcept {
  try {
    std::unique_lock lock(mu_, std::defer_lock);
    // A copy still running at the deadline keeps the stream: it is left to the process's end.
    if (!lock.try_lock_until(deadline)) return;
    shut_down_ = true;
    if (teardown == Teardown::leave) return;
    char what[48];  // no allocation for the message: this runs at exit
    std::snprintf(what, sizeof what, "(transfers of cuda:%d)", device_.index());
    stream_.reset(what);
  } catch (const std::system_error&) {
    // The lock could not be taken: the stream is left to the process's end.
  }
}

// --- CudaDevice --------------------------------------------------------------------------

namespace {

detail::Ref<detail::Work> first_on(const detail::Ref<detail::Timeline>& timeline, const char* name) {
  auto work = detail::make_ref<detail::Work>(timeline, name, detail::WorkKind::host);
  work->set_seq(1);
  return work;
}

}  // namespace

CudaDevice::CudaDevice(Device device)
    : device_(device),
      start_up_(detail::make_ref<detail::Timeline>(device.str() + " start-up")),
      started_work_(first_on(start_up_, "the device's start-up (CUPTI, eventide's kernels)")),
      started_dep_{started_work_, detail::DepKind::order} {
  check(cudaGetDeviceProperties(&props_, device.index()), "cudaGetDeviceProperties",
        "for " + device.str());
  progress_ = choose_progress(device);
  DeviceScope scope(device);
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange",
        "for " + device.str());
  priority_range_ = {least, greatest};
}

CudaDevice::~CudaDevice() = default;

std::exception_ptr CudaDevice::broken() const noexcept {
  // Every launch asks: no lock until the device has failed.
  if (!is_broken_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mu_);
  return broken_;
}

namespace {

// The device's failure, naming it; without memory for the message, `error` itself.
std::exception_ptr device_failure(Device device, const std::exception_ptr& error) noexcept {
  try {
    try {
      std::rethrow_exception(error);
    } catch (const DeviceError& e) {
      return std::make_exception_ptr(DeviceError(
          device.str() + " has failed and cannot run more work (" + e.what() + ")", e.call(),
          e.status()));
    } catch (const std::exception& e) {
      return std::make_exception_ptr(
          DeviceError(device.str() + " has failed and cannot run more work (" + e.what() + ")"));
    }
  } catch (...) {
  }
  return error;
}

}  // namespace

void CudaDevice::watch(std::shared_ptr<detail::DeviceStream> stream) noexcept {
  watcher_.watch(std::move(stream));
}

void CudaDevice::mark_broken(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = device_failure(device_, error);
    error = broken_;
    is_broken_.store(true, std::memory_order_release);
  }
  watcher_.abandon_all(error);
}

void CudaDevice::begin_start() noexcept {
  if (started() || starter_.joinable()) return;
  try {
    starter_ = detail::RuntimeThread([this] {
      pthread_setname_np(pthread_self(), "eventide-start");
      // As the watcher's: its calls must not invalidate another thread's global-mode capture.
      cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
      (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
      start();
    });
  } catch (...) {
    start();  // no thread to be had: the watcher starts the device itself
  }
}

void CudaDevice::start() noexcept {
  if (started()) return;
  try {
    (void)Timing::get();
  } catch (...) {
    // Out of memory setting up: ops are untimed (Timing::get is tried again by their scopes).
  }
  DeviceScope scope(device_.index(), std::nothrow);
  (void)kernels::load();  // a failure shows at the first launch instead
  start_up_->advance(1);
}

void CudaDevice::stop(detail::Clock::time_point deadline) noexcept {
  drain_.stop(deadline);
  watcher_.stop(deadline);
  starter_.join_until(deadline);  // (after the watcher: it is the one that starts it)
  // After a sticky error every CUDA call fails: destroying the stream would only print that.
  transfer_.shutdown(deadline, broken() ? TransferStream::Teardown::leave
                                        : TransferStream::Teardown::destroy);
}

}  // namespace eventide::backends::cuda
