#include "backends/cuda/cuda_ipc.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

namespace {

static_assert(sizeof(cudaIpcEventHandle_t) <= detail::kIpcNativeHandleBytes,
              "the shared block has room for a CUDA IPC event handle");

class CudaIpcEvent final : public detail::IpcNativeEvent {
 public:
  CudaIpcEvent(Device device, OwnedEvent event, const cudaIpcEventHandle_t& handle)
      : device_(device), event_(std::move(event)), handle_(handle) {}

  std::span<const std::byte> handle() const noexcept override {
    return {reinterpret_cast<const std::byte*>(&handle_), sizeof(handle_)};
  }

  void record_on(void* native_stream) override {
    check(cudaEventRecord(event_.get(), static_cast<cudaStream_t>(native_stream)), "cudaEventRecord",
          "for an interprocess event on " + device_.str());
  }

  void wait_on(void* native_stream) override {
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(native_stream), event_.get(), 0),
          "cudaStreamWaitEvent", "for an event imported from another process on " + device_.str());
  }

 private:
  Device device_;
  OwnedEvent event_;  // cudaEventDestroy also closes an opened one
  cudaIpcEventHandle_t handle_;
};

}  // namespace

std::unique_ptr<detail::IpcNativeEvent> create_ipc_event(Device device) {
  DeviceScope scope(device);
  const std::string what = "for an interprocess event on " + device.str();
  OwnedEvent event = OwnedEvent::create(cudaEventInterprocess | cudaEventDisableTiming, what);
  cudaIpcEventHandle_t handle;
  check(cudaIpcGetEventHandle(&handle, event.get()), "cudaIpcGetEventHandle", what);
  return std::make_unique<CudaIpcEvent>(device, std::move(event), handle);
}

std::unique_ptr<detail::IpcNativeEvent> open_ipc_event(Device device, std::span<const std::byte> bytes) {
  cudaIpcEventHandle_t handle;
  if (bytes.size() != sizeof(handle)) {
    std::string message = "a CUDA interprocess event handle has ";
    message += std::to_string(sizeof(handle));
    message += " bytes, not ";
    message += std::to_string(bytes.size());
    throw InvalidArgument(message);
  }
  std::memcpy(&handle, bytes.data(), sizeof(handle));
  DeviceScope scope(device);
  cudaEvent_t event = nullptr;
  check(cudaIpcOpenEventHandle(&event, handle), "cudaIpcOpenEventHandle",
        "for an event exported by another process, on " + device.str());
  return std::make_unique<CudaIpcEvent>(device, OwnedEvent(event), handle);
}

}  // namespace eventide::backends::cuda
