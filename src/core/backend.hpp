// The seam between the core and a backend: what a device must provide.
//
// A backend is a folder src/backends/<name>/ with its own CMake target, and describes itself
// to the core by one BackendDescriptor (below): its kind's name and numbering, its rank as the
// default device, its DLPack device type, and how to find its devices. Each device it finds
// is a DeviceBackend (the CPU; each CUDA GPU): the core asks it for streams and memory, and
// for the native streams it imports; it knows nothing else of the device. The build lists
// the enabled backends (eventide_add_backend in src/CMakeLists.txt) and generates the
// registry from that list (compiled_backends(); the ops layer finds each backend's kernels
// there too, ops/kernels.hpp): adding one is a new folder and one line there, never an edit
// of the core. The core itself (the eventide_core target) links no backend: the test suite links it
// with a fake one alone (tests/fake).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fork.hpp"
#include "core/graph_recorder.hpp"
#include "core/ref.hpp"
#include "core/timeline.hpp"
#include "eventide/device.hpp"

namespace eventide::detail {

class StreamState;
class Storage;

// A device's native events (CUDA's cudaEvent_t), for Event::from_native and
// Event::native_handle: the core passes them through as opaque pointers. Thread-safety: every
// member, from any thread.
class NativeEvents {
 public:
  // Makes `native_stream` (one of this device's) wait on the device for the most recent record
  // of `event` (a never-recorded one: nothing to wait for). Called inside a launch body, the
  // device current. InvalidArgument if `event` is not a native event of this process.
  virtual void wait(void* native_stream, void* event) = 0;
  // A new native event without timing, on this device. DeviceError.
  virtual void* create() = 0;
  // Records `event` at the current end of `native_stream`. Inside a launch body. DeviceError.
  virtual void record(void* event, void* native_stream) = 0;
  // Destroys an event create() made. Never throws; from any thread, any lock held.
  virtual void destroy(void* event) noexcept = 0;

 protected:
  ~NativeEvents() = default;
};

// A point on a host timeline that passes once all work queued on a device before it was
// taken has finished, by anyone (DeviceBackend::device_wide_point).
struct DevicePoint {
  Ref<Timeline> timeline;
  std::uint64_t seq = 0;
};

// A native event shared between processes (eventide/ipc.hpp's GPU path): on CUDA, an event
// made with cudaEventInterprocess, or one opened from another process's handle. Destroyed
// (closed) with this object.
class IpcNativeEvent {
 public:
  virtual ~IpcNativeEvent() = default;
  // The bytes another process opens it by (DeviceBackend::open_ipc_event); at most
  // kIpcNativeHandleBytes.
  virtual std::span<const std::byte> handle() const noexcept = 0;
  // Called inside a Stream::enqueue body on a stream of this device (the device current),
  // with its native stream: records the event there (the exporter), or makes the native stream
  // wait on the GPU for the event's latest record (the importer). DeviceError on failure.
  virtual void record_on(void* native_stream) = 0;
  virtual void wait_on(void* native_stream) = 0;
};
inline constexpr std::size_t kIpcNativeHandleBytes = 64;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual Device device() const = 0;
  virtual DeviceInfo info() const = 0;
  // A new stream. Cheap: no thread or native object needs to exist before its first op.
  // `priority` is within stream_priority_range() (the core clamps it).
  virtual std::shared_ptr<StreamState> create_stream(std::uint64_t id, int priority) = 0;
  // The stream priorities of the device as {least, greatest}: lower numbers are more urgent,
  // as in CUDA ({0, -5} on an H200); {0, 0} where the device has one priority.
  virtual std::pair<int, int> stream_priority_range() const { return {0, 0}; }
  // The device's native events, or null where it has none (the CPU).
  virtual NativeEvents* native_events() noexcept { return nullptr; }
  // For synchronize(device): where work runs on the device that eventide's streams do not
  // see (a GPU, through other libraries' native streams), a point that passes once all work
  // queued on the device before this call has finished; nullopt where eventide's streams are
  // all there is (the CPU). DeviceError if the device has failed. Never blocks.
  virtual std::optional<DevicePoint> device_wide_point() { return std::nullopt; }
  // The device's failure as a whole (a GPU's sticky error), else null.
  virtual std::exception_ptr device_error() const { return nullptr; }
  // A stream over a native one owned by someone else (a cudaStream_t): the same one for the
  // same native stream while it lives. `make_id` gives a new stream's id. InvalidArgument
  // where the device has none, or if the native stream is another device's.
  virtual std::shared_ptr<StreamState> wrap_stream(void* native,
                                                   const std::function<std::uint64_t()>& make_id) = 0;
  // Whether `native` is a native stream of this device (Stream::from_native without a device).
  virtual bool owns_native_stream(void* native) const { (void)native; return false; }
  // `bytes` of device memory for the output of an op the caller enqueues on `stream` next,
  // before the tensor is handed out; freed when the last reference goes. Stream-ordered: it
  // may be memory that earlier work of `stream` still uses (its tensor gone, see
  // Storage::recycle_after), which the op runs after. DeviceError if it cannot.
  virtual Ref<Storage> allocate(std::size_t bytes, StreamState& stream) = 0;
  // `bytes` of host memory (a Storage of Device::cpu()) that this device copies to and from
  // best (pinned on a GPU): the staging of copies between devices, and the memory of a cpu
  // tensor copied from this device. DeviceError if it cannot.
  virtual Ref<Storage> allocate_host(std::size_t bytes) = 0;
  // Interprocess events (eventide/ipc.hpp). A new native event other processes can open;
  // null where the device has none (its events cross processes by the host path alone).
  // DeviceError if it cannot be made.
  virtual std::unique_ptr<IpcNativeEvent> create_ipc_event() { return nullptr; }
  // Opens the native event of another process from its handle() bytes; null where the device
  // has no such events. DeviceError if the native call fails.
  virtual std::unique_ptr<IpcNativeEvent> open_ipc_event(std::span<const std::byte> handle) {
    (void)handle;
    return nullptr;
  }
  // fork() (see Runtime). Before it the device quiesces: host work stops starting, and the
  // caller waits until `deadline` for what runs (calls nest); with ForkLocks::hold
  // (pthread_atfork's prepare step) it also holds its locks until after the fork, so that the
  // child finds them free. After it, the parent goes on (given what before_fork was: held
  // locks are let go);
  // the child gets a working device (true), or a device it may not use (false: a GPU, since
  // CUDA does not survive fork), whose work from before the fork then fails.
  virtual void before_fork(std::chrono::steady_clock::time_point deadline, ForkLocks locks) noexcept {
    (void)deadline;
    (void)locks;
  }
  virtual void after_fork_in_parent(ForkLocks locks) noexcept { (void)locks; }
  virtual bool after_fork_in_child() noexcept { return true; }

  // Why the device's streams cannot capture graphs (eventide/graph.hpp), for the refusal
  // ("…: capture on the cpu device"); empty where they can.
  virtual std::string why_no_capture() const {
    return "graph capture is not supported on " + device().str() + " in this build";
  }
  // Where they can: the recorder of a new capture (core/graph_recorder.hpp); `graph` names
  // it ("graph 3, captured on cpu stream 1"). By default the host's way: every op's body is
  // kept and run again at each replay, on any of the device's streams (bodies that use their
  // memory by address and nothing of the stream they were issued on). DeviceError if the
  // device cannot begin one.
  virtual std::unique_ptr<GraphRecorder> record_graph(std::string graph) {
    return make_host_graph_recorder(std::move(graph));
  }

  // Gives the memory the backend keeps for reuse (blocks of freed tensors) back to the system;
  // returns the bytes of its own caches given back. Never called under a runtime lock.
  virtual std::size_t empty_cache() noexcept { return 0; }
  // Process exit: fail the work still queued, let running work finish until `deadline` (the
  // whole runtime's grace period), stop threads.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

// How the devices of a kind are numbered and spelled.
enum class DeviceIndexing : std::uint8_t {
  single,   // one device, index 0, spelled by the kind's name alone ("cpu"; "cpu:0" parses)
  indexed,  // "kind:N" for any N >= 0; "kind" alone is "kind:0"
};

// What a backend tells the core about itself. One constant per backend, named
// eventide::backends::<name>::kDescriptor (the generated registry refers to it by that name).
struct BackendDescriptor {
  // The kind's name, as devices are spelled ("cpu", "cuda"), and its numbering.
  std::string_view kind;
  DeviceIndexing indexing;
  // default_device() is device 0 of the available kind of highest priority (cpu: 0, cuda: 100).
  int default_priority;
  // DLPack's DLDeviceType of the kind's memory (kDLCPU = 1, kDLCUDA = 2); 0 if it has none.
  int dlpack_device_type;
  // More DLPack device types whose memory this kind reads as its own (the cpu: host memory
  // that another runtime pinned, kDLCUDAHost = 3, kDLROCMHost = 11).
  std::span<const int> dlpack_also_reads;
  // Every device of the kind on this machine, in index order (none: why_unavailable says
  // why). Called once, when the runtime starts. Each device imports native streams through
  // DeviceBackend::wrap_stream and owns_native_stream.
  std::vector<std::unique_ptr<DeviceBackend>> (*discover)();
  // Why `device` (of this kind) is not available, for messages.
  std::string (*why_unavailable)(Device device);
  // Whether the kind's devices have native streams to import (Stream::from_native).
  bool has_native_streams;
};

// The backends of this build, in the order their devices are listed (cpu first, where it is
// compiled in). Defined by the registry the build generates from its list of backends
// (src/backends/registry.cpp.in); a program that links the core alone defines its own (the
// fake backend's test).
std::span<const BackendDescriptor* const> compiled_backends() noexcept;

// The descriptor of `kind`'s backend, or null where this build has none.
const BackendDescriptor* find_backend(DeviceKind kind) noexcept;

// The kinds whose devices may have native streams, for messages: "CUDA" (the API's named
// kinds without a backend in this build count, as they might).
std::string native_stream_kinds();

// Why `device` is not available, for messages: its backend's words, or that this build has
// no backend of its kind.
std::string why_unavailable(Device device);

}  // namespace eventide::detail
