// The seam between the core and a backend: what a device must provide.
//
// One DeviceBackend per device (the CPU; each CUDA GPU). The core asks it for streams and
// memory and for its kernels (ops/kernels.hpp: what the ops layer needs); it knows nothing
// else of the device. Backends are listed in src/backends/registry.cpp: adding one is a new
// folder and one line there, never an edit of the core.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/ref.hpp"
#include "eventide/device.hpp"

namespace eventide::ops {
class Kernels;
}

namespace eventide::detail {

class StreamState;
class Storage;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual Device device() const = 0;
  virtual DeviceInfo info() const = 0;
  // A new stream. Cheap: no thread or native object needs to exist before its first op.
  virtual std::shared_ptr<StreamState> create_stream(std::uint64_t id) = 0;
  // A stream over a native one owned by someone else (a cudaStream_t): the same one for the
  // same native stream while it lives. `make_id` gives a new stream's id. InvalidArgument
  // where the device has none, or if the native stream is another device's.
  virtual std::shared_ptr<StreamState> wrap_stream(void* native,
                                                   const std::function<std::uint64_t()>& make_id) = 0;
  // Whether `native` is a native stream of this device (Stream::from_native without a device).
  virtual bool owns_native_stream(void* native) const { (void)native; return false; }
  // `bytes` of device memory for an op about to be enqueued on `stream` (stream-ordered
  // where the device has that), freed when the last reference goes. DeviceError if it cannot.
  virtual Ref<Storage> allocate(std::size_t bytes, StreamState& stream) = 0;
  virtual ops::Kernels& kernels() = 0;
  // fork() (see Runtime). Before it the device quiesces: host work stops starting, and the
  // caller waits until `deadline` for what runs (calls nest); with `hold` (pthread_atfork's
  // prepare step) it also holds its locks until after the fork, so that the child finds them
  // free. After it, the parent goes on (`held`: the locks taken by before_fork are let go);
  // the child gets a working device (true), or a device it may not use (false: a GPU, since
  // CUDA does not survive fork), whose work from before the fork then fails.
  virtual void before_fork(std::chrono::steady_clock::time_point deadline, bool hold) noexcept {
    (void)deadline;
    (void)hold;
  }
  virtual void after_fork_in_parent(bool held) noexcept { (void)held; }
  virtual bool after_fork_in_child() noexcept { return true; }
  // Process exit: fail the work still queued, let running work finish until `deadline` (the
  // whole runtime's grace period), stop threads.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

// Every device the compiled-in backends find on this machine (src/backends/registry.cpp).
std::vector<std::unique_ptr<DeviceBackend>> discover_devices();

// Whether a backend for `kind` was compiled in, and why a device is missing, for messages.
std::string why_unavailable(Device device);

}  // namespace eventide::detail
