// Runtime: the process-wide registry of devices, their default streams, their callback
// threads and random generators, and the calling thread's current streams.
//
// It starts at first use (Runtime::get()) and shuts down once, at process exit: streams stop
// (queued work fails, running work finishes), callback threads stop. Its memory is never
// freed, so handles that outlive it (a static Tensor) are still safe to destroy; calls that
// would start new work after shutdown throw StateError.
//
// Thread-safety: all members, from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/backend.hpp"
#include "core/dispatcher.hpp"
#include "core/stream_state.hpp"

namespace eventide::detail {

class DeviceContext {
 public:
  explicit DeviceContext(std::unique_ptr<DeviceBackend> backend);

  Device device() const noexcept { return device_; }
  DeviceBackend& backend() noexcept { return *backend_; }
  Dispatcher& dispatcher() noexcept { return dispatcher_; }

  // The stream ops use when no StreamGuard says otherwise (created at first use).
  std::shared_ptr<StreamState> default_stream();
  // A new stream of `priority`, clamped to the device's range as CUDA and PyTorch clamp it.
  std::shared_ptr<StreamState> create_stream(std::uint64_t id, int priority = 0);
  // A stream of the runtime's own for short internal work (Event::from_native's GPU-side
  // wait, Event::native_handle's record): one whose work has all finished, so that what is
  // put there waits for nothing else, or a new one; past kInternalStreams, the next in turn.
  std::shared_ptr<StreamState> internal_stream(const std::function<std::uint64_t()>& make_id);
  static constexpr std::size_t kInternalStreams = 16;
  // The backend's stream over `native` (see DeviceBackend::wrap_stream), tracked like the
  // others.
  std::shared_ptr<StreamState> wrap_stream(void* native, const std::function<std::uint64_t()>& make_id);
  // Every stream of the device still alive (held by a handle or by pending work).
  std::vector<std::shared_ptr<StreamState>> live_streams();

  // Reserves `blocks` counter blocks of the generator: returns (seed, first block).
  std::pair<std::uint64_t, std::uint64_t> reserve_random(std::uint64_t blocks);
  void manual_seed(std::uint64_t seed);

  // Stops the backend (its dispatcher is stopped by the runtime first), waiting for running
  // work until `deadline`.
  void shutdown(Clock::time_point deadline) noexcept;

  // In the child of a fork(): the device cannot be used there (DeviceBackend::after_fork_in_child).
  bool lost_in_fork() const noexcept { return lost_in_fork_; }
  void set_lost_in_fork() noexcept { lost_in_fork_ = true; }

 private:
  const Device device_;
  std::unique_ptr<DeviceBackend> backend_;
  Dispatcher dispatcher_;
  // Not a std::once_flag: a first creation that throws (out of memory) must leave the next
  // call to try again, and call_once's exceptional path is not reliable everywhere (under
  // ThreadSanitizer's pthread_once the next caller hangs).
  RuntimeMutex default_mu_;
  std::atomic<bool> default_made_{false};
  std::shared_ptr<StreamState> default_stream_;  // set once, before default_made_
  RuntimeMutex mu_;
  std::vector<std::weak_ptr<StreamState>> streams_;
  RuntimeMutex internal_mu_;
  std::vector<std::shared_ptr<StreamState>> internal_;  // under internal_mu_
  std::size_t internal_next_ = 0;  // under internal_mu_: the next in turn once all are busy
  std::uint64_t seed_ = 0;
  std::uint64_t offset_ = 0;
  bool lost_in_fork_ = false;
};

class Runtime {
 public:
  // The runtime; starts it on first use.
  static Runtime& get();

  // StateError once the runtime has shut down.
  void check_running() const;

  // The context of `device`; InvalidArgument if it is not available.
  DeviceContext& context(Device device);
  DeviceContext* find(Device device) noexcept;
  std::vector<Device> devices() const;
  Device default_device();

  // Where the callbacks of an event on `device` run (host-only events: a host thread).
  Dispatcher& dispatcher(const std::optional<Device>& device);

  std::shared_ptr<StreamState> create_stream(Device device, int priority = 0);
  std::shared_ptr<StreamState> internal_stream(Device device);
  std::shared_ptr<StreamState> wrap_stream(Device device, void* native);
  // The device whose backend knows the native stream `native`; InvalidArgument if none does.
  Device native_stream_device(void* native);
  std::shared_ptr<StreamState> current_stream(Device device);

  void shutdown() noexcept;

  // Every available device's backend's empty_cache(); the bytes given back.
  std::size_t empty_cache() noexcept;

  // fork(). The runtime's stage of fork's steps (core/fork.hpp: set when the runtime
  // starts): before it, every device quiesces (running CPU ops get kFork-
  // Grace to finish, none starts) and holds its locks; after it, the parent goes on, and the
  // child gets a working CPU (work queued before the fork runs there too; an op whose body
  // was still running fails) and loses the GPUs (CUDA does not survive fork: using one is a
  // StateError, and their work from before the fork fails).
  void prepare_fork() noexcept;
  void after_fork(ForkSide side) noexcept;
  // The quiescing step alone, for a caller that must wait with other locks let go (Python
  // waits for ops whose bodies need the GIL); resume_after_fork_pause() undoes it in the
  // parent. No-ops if the runtime has not started.
  static void pause_for_fork() noexcept;
  static void resume_after_fork_pause() noexcept;

 private:
  Runtime();

  std::vector<std::unique_ptr<DeviceContext>> contexts_;
  Dispatcher host_dispatcher_{"host"};
  std::atomic<std::uint64_t> next_stream_id_{0};
  std::atomic<bool> running_{true};
  std::once_flag default_device_once_;
  std::optional<Device> default_device_;
  std::exception_ptr default_device_error_;
};

// How long fork() waits for running CPU ops before it goes ahead.
inline constexpr std::chrono::seconds kForkGrace{2};

// Sets the calling thread's current stream for `device` (null: back to the default stream)
// and returns the previous setting. Needs no runtime (it runs in StreamGuard destructors).
// Allocates nothing once reserve_current_stream(device) has been called on this thread.
std::shared_ptr<StreamState> exchange_current_stream(Device device,
                                                     std::shared_ptr<StreamState> stream) noexcept;
// Makes room for the calling thread's current stream of `device` (std::bad_alloc): what a
// StreamGuard's constructor does first, so that it either throws or makes its stream current
// (its destructor then only exchanges).
void reserve_current_stream(Device device);

// The device of the calling thread's innermost stream block (StreamGuard, Python's `with
// stream:`), which record() without a device uses, as PyTorch's `with torch.cuda.stream(s)`
// also makes s's device current; nullopt outside any block. Exchanged like the streams.
std::optional<Device> exchange_block_device(std::optional<Device> device) noexcept;
std::optional<Device> block_device() noexcept;

}  // namespace eventide::detail
