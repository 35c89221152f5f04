// Owners of CUDA's native objects, on the model of CCCL's cuda::stream / cuda::stream_ref:
// an owning type, move-only, that destroys its object once, and a non-owning view that never
// does. Which of the two a member is says who destroys the object: there is no "owning" flag.
//
// State: an owner is empty (default-made, moved from, reset) or holds one object; a view
// holds a handle or null.
//
// Errors: making an object throws DeviceError naming it ("cudaStreamCreateWithFlags failed
// for cuda:0 stream 3: ..."); destroying one never throws: the no-throw form of the call
// logs a failure (stderr) and goes on, since it runs in destructors.
//
// Lifetime: destroying an object is a CUDA call, which must not run after the CUDA runtime is
// torn down at exit. The runtime (and with it each device's state) is never freed; what lives
// as long as the process is destroyed by the backend's shutdown (CudaDevice::stop), in order,
// or left to the process's end.
//
// Thread-safety: an owner or a view is not itself shared for writing (a move or a reset)
// between threads; the native handle may be used from any thread, as CUDA allows.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// A CUDA stream someone else owns (another library's, a special handle such as
// cudaStreamPerThread), or one an OwnedStream owns: never destroyed through this. Copyable.
class StreamRef {
 public:
  constexpr StreamRef() noexcept = default;
  constexpr explicit StreamRef(cudaStream_t handle) noexcept : handle_(handle) {}
  cudaStream_t get() const noexcept { return handle_; }

 protected:
  cudaStream_t handle_ = nullptr;
};

// A non-blocking CUDA stream made by this object, destroyed (on its device) when the owner
// ends or is reset. Move-only.
class OwnedStream : public StreamRef {
 public:
  OwnedStream() noexcept = default;
  // A new non-blocking stream on `device` of `priority` (CUDA clamps it to the device's
  // range), which must be current on the calling thread (DeviceScope). DeviceError
  // ("cudaStreamCreateWithPriority failed <what>: ...").
  static OwnedStream create(Device device, const std::string& what, int priority = 0);

  OwnedStream(OwnedStream&& other) noexcept
      : StreamRef(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  OwnedStream& operator=(OwnedStream&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() { reset(); }

  // Destroys the stream now, if there is one: its device is made current for the call and
  // the calling thread's current device is restored after. `what` names it in the message if
  // CUDA reports a failure. Work still queued on it completes first (cudaStreamDestroy).
  void reset(const char* what = "(a stream of eventide's)") noexcept;

 private:
  OwnedStream(cudaStream_t handle, int device) noexcept : StreamRef(handle), device_(device) {}
  int device_ = -1;
};

// A CUDA event made by this object, destroyed when the owner ends or is reset. Move-only.
class OwnedEvent {
 public:
  OwnedEvent() noexcept = default;
  // A new event with `flags` (cudaEventDisableTiming, ...) on the current device.
  // DeviceError ("cudaEventCreateWithFlags failed <what>: ...").
  static OwnedEvent create(unsigned int flags, const std::string& what);
  // Takes ownership of `event` (made elsewhere).
  explicit OwnedEvent(cudaEvent_t event) noexcept : event_(event) {}

  OwnedEvent(OwnedEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  OwnedEvent& operator=(OwnedEvent&& other) noexcept {
    if (this != &other) {
      reset();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  ~OwnedEvent() { reset(); }

  cudaEvent_t get() const noexcept { return event_; }
  // Gives up ownership: the caller destroys the event.
  cudaEvent_t release() noexcept { return std::exchange(event_, nullptr); }
  // Destroys the event now, if there is one (cudaEventDestroy: no-throw form).
  void reset() noexcept;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace eventide::backends::cuda
