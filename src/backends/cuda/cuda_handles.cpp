#include "backends/cuda/cuda_handles.hpp"

#include "backends/cuda/cuda_api.hpp"

namespace eventide::backends::cuda {

OwnedStream OwnedStream::create(Device device, const std::string& what, int priority) {
  cudaStream_t handle = nullptr;
  check(cudaStreamCreateWithPriority(&handle, cudaStreamNonBlocking, priority),
        "cudaStreamCreateWithPriority", what);
  return OwnedStream(handle, device.index());
}

void OwnedStream::reset(const char* what) noexcept {
  cudaStream_t handle = std::exchange(handle_, nullptr);
  if (!handle) return;
  DeviceScope scope(device_, std::nothrow);
  check_nothrow(cudaStreamDestroy(handle), "cudaStreamDestroy", what);
}

OwnedEvent OwnedEvent::create(unsigned int flags, const std::string& what) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, flags), "cudaEventCreateWithFlags", what);
  return OwnedEvent(event);
}

void OwnedEvent::reset() noexcept {
  if (cudaEvent_t event = std::exchange(event_, nullptr)) {
    check_nothrow(cudaEventDestroy(event), "cudaEventDestroy", "(an event of eventide's)");
  }
}

}  // namespace eventide::backends::cuda
