// DeviceScope: the CUDA backend's one header for the other parts of eventide that call CUDA
// themselves (distributed/nccl.cpp), so that they make a device current as the backend does
// without reaching into its private headers. Defined in cuda_api.cpp.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <new>

#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// Makes a device the calling thread's current one for a scope (the CUDA runtime's current
// device is per thread; every entry point of the backend opens one), then gives the thread
// back the context it had: eventide leaves the current device as the program set it, since
// CuPy, PyTorch's current_device and raw CUDA code allocate and launch there. A thread that
// had no context keeps the device's: restoring "none" would only send its next runtime call
// to device 0 and make a context there, which a process driving another GPU never needs.
// For the scope the thread is also in cudaStreamCaptureModeRelaxed (then given back its own
// mode): while another library captures a graph in the global mode (torch.cuda.graph's
// default), eventide's calls on streams outside the capture (a query, an allocation) would
// otherwise invalidate that capture.
class DeviceScope {
 public:
  // DeviceError ("cudaSetDevice failed for cuda:1: ...") if the device cannot be made current.
  explicit DeviceScope(Device device);
  // For destructors and threads: ok() says whether the device is current.
  DeviceScope(int index, std::nothrow_t) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  bool ok() const noexcept { return status_ == cudaSuccess; }

 private:
  CUcontext restore_ = nullptr;  // null: nothing to give back
  cudaError_t status_ = cudaSuccess;
  cudaStreamCaptureMode capture_mode_ = cudaStreamCaptureModeRelaxed;  // the thread's, given back
  bool capture_mode_set_ = false;
};

}  // namespace eventide::backends::cuda
