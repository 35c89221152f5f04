#include "backends/cuda/cuda_backend.hpp"

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_graph.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cuda_ipc.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"
#include "ops/kernels.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::StreamState;

// What discover() found, for why_unavailable: why there is no device at all (empty where
// there are some), how many cudaGetDeviceCount counted, and why those it counted but could not
// set up failed. Written once, by discover(), before any reader.
std::string g_why_none;
int g_device_count = 0;
std::map<int, std::string> g_setup_failures;

// cudaEvent_t through the core's NativeEvents (Event::from_native, Event::native_handle).
class CudaNativeEvents final : public detail::NativeEvents {
 public:
  explicit CudaNativeEvents(Device device) : device_(device) {}

  void wait(void* native_stream, void* event) override {
    const cudaError_t st =
        cudaStreamWaitEvent(static_cast<cudaStream_t>(native_stream), static_cast<cudaEvent_t>(event), 0);
    if (st == cudaErrorInvalidResourceHandle || st == cudaErrorInvalidValue) {
      (void)cudaGetLastError();
      throw InvalidArgument("Event::from_native: " + std::to_string(reinterpret_cast<std::uintptr_t>(event)) +
                            " is not a CUDA event of this process (" + describe(st) + ")");
    }
    check(st, "cudaStreamWaitEvent", [&] { return "(a native event, on " + device_.str() + ")"; });
  }
  void* create() override {
    DeviceScope scope(device_);
    return OwnedEvent::create(cudaEventDisableTiming, "(Event::native_handle on " + device_.str() + ")").release();
  }
  void record(void* event, void* native_stream) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(native_stream)),
          "cudaEventRecord", [&] { return "(Event::native_handle on " + device_.str() + ")"; });
  }
  void destroy(void* event) noexcept override {
    DeviceScope scope(device_.index(), std::nothrow);
    OwnedEvent owned(static_cast<cudaEvent_t>(event));  // destroyed here
  }

 private:
  const Device device_;
};

class CudaBackend final : public detail::DeviceBackend {
 public:
  explicit CudaBackend(int index)
      : device_(Device::cuda(index)), state_(device_), kernels_(make_kernels(state_)) {
    configure_pool(device_);
  }

  Device device() const override { return device_; }

  DeviceInfo info() const override {
    const cudaDeviceProp& p = state_.props();
    std::string desc = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                       ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
                       std::to_string(p.totalGlobalMem >> 20) + " MiB; timelines: " +
                       state_.progress().describe() +
                       "; op times: " + Timing::describe_without_waiting() + "; matmul: cuBLASLt" +
                       (allow_tf32() ? " (TF32 allowed)" : "");
    return DeviceInfo{device_, p.name, desc};
  }

  std::shared_ptr<StreamState> create_stream(std::uint64_t id, int priority) override {
    return std::make_shared<OwnedCudaStream>(device_, id, state_, priority);
  }

  std::pair<int, int> stream_priority_range() const override { return state_.priority_range(); }

  std::shared_ptr<StreamState> wrap_stream(void* native_stream,
                                           const std::function<std::uint64_t()>& make_id) override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    auto handle = static_cast<cudaStream_t>(native_stream);
    // Null is the legacy default stream in the runtime API; named explicitly, so that the
    // wrapper's native handle is never null (null means "no native stream" to the core).
    if (handle == nullptr) handle = cudaStreamLegacy;
    DeviceScope scope(device_);
    // (A stream being captured by other code is wrapped too: the calls below ask for its
    // attributes only, which a capture allows, and eventide's ops on it then go into that
    // capture: core/capture.hpp.)
    // The special handles name a stream of the current device: any device's, once it is made
    // current (which eventide does before every launch). Any other belongs to one device.
    const char* what = special_stream(handle);
    if (!what) {
      int owner = -1;
      check(cudaStreamGetDevice(handle, &owner), "cudaStreamGetDevice",
            "(Stream::from_native on " + device_.str() + ")");
      if (owner != device_.index()) {
        throw InvalidArgument("Stream::from_native: the native stream belongs to cuda:" +
                              std::to_string(owner) + ", not " + device_.str());
      }
      what = "wrapped";
    }
    // One wrapper per native stream (CUDA's stream id: unique in the process; the
    // per-thread default stream has one per thread), so that eventide's work on it has one
    // order and one timeline however often it is wrapped.
    unsigned long long native_id = 0;
    check(cudaStreamGetId(handle, &native_id), "cudaStreamGetId", "(Stream::from_native)");
    std::lock_guard lock(wrap_mu_);
    std::erase_if(wrapped_, [](const auto& entry) { return entry.second.expired(); });
    if (auto it = wrapped_.find(native_id); it != wrapped_.end()) {
      if (auto live = it->second.lock()) return live;
    }
    auto stream = std::make_shared<WrappedCudaStream>(device_, make_id(), state_, StreamRef(handle), what);
    wrapped_[native_id] = stream;
    return stream;
  }

  bool owns_native_stream(void* native_stream) const override {
    auto handle = static_cast<cudaStream_t>(native_stream);
    int device = -1;
    if (special_stream(handle)) return cudaGetDevice(&device) == cudaSuccess && device == device_.index();
    if (cudaStreamGetDevice(handle, &device) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return device == device_.index();
  }

  Ref<Storage> allocate(std::size_t bytes, StreamState& stream) override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    // Before the allocation: a stream-ordered allocation on a capturing stream would be the
    // graph's memory (valid only while it runs), and the op is refused anyway, unless the
    // stream follows that capture (CudaStream::allocate: then memory usable at once).
    CudaStream& cs = as_cuda_stream(stream);
    cs.check_not_capturing();
    return cs.allocate(bytes);
  }

  Ref<Storage> allocate_host(std::size_t bytes) override { return allocate_pinned(bytes); }

  // Captures record into CUDA graphs (backends/cuda/cuda_graph.hpp).
  std::string why_no_capture() const override {
    if (auto e = state_.broken()) return "the device has failed (" + detail::describe_error(e) + ")";
    return {};
  }
  std::unique_ptr<detail::GraphRecorder> record_graph(std::string graph) override {
    return record_cuda_graph(device_, std::move(graph));
  }

  std::size_t empty_cache() noexcept override {
    return state_.broken() ? 0 : cuda::empty_cache(device_);
  }

  ops::Kernels& kernels() noexcept { return *kernels_; }

  detail::NativeEvents* native_events() noexcept override { return &native_events_; }

  std::optional<detail::DevicePoint> device_wide_point() override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    return state_.drain().point();
  }

  std::exception_ptr device_error() const override { return state_.broken(); }

  std::unique_ptr<detail::IpcNativeEvent> create_ipc_event() override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    return cuda::create_ipc_event(device_);
  }

  std::unique_ptr<detail::IpcNativeEvent> open_ipc_event(std::span<const std::byte> handle) override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    return cuda::open_ipc_event(device_, handle);
  }

  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept override {
    state_.stop(deadline);
    memory_shutdown();
  }

  void before_fork(std::chrono::steady_clock::time_point deadline, detail::ForkLocks locks) noexcept override {
    // Work on the GPU goes on across a fork; only the watcher's locks must be free in the
    // child (pthread_atfork's step): it waits between two turns until after the fork.
    if (locks == detail::ForkLocks::hold) state_.watcher().pause_for_fork(deadline);
  }

  void after_fork_in_parent(detail::ForkLocks locks) noexcept override {
    if (locks == detail::ForkLocks::hold) state_.watcher().resume_after_fork();
  }

  bool after_fork_in_child() noexcept override {
    // CUDA does not survive fork: the child has the parent's handles but no context, and not
    // the watcher thread. The work from before the fork fails instead of never finishing.
    std::exception_ptr error;
    try {
      error = std::make_exception_ptr(StateError(
          "the process is the child of a fork(), and CUDA does not survive fork: start the "
          "child with the 'spawn' or 'forkserver' method, or fork before the first use of the GPU"));
    } catch (...) {
      error = detail::out_of_memory_error();
    }
    // Its memory means nothing here: storages the abandoned work lets go of are not given
    // back (no CUDA call, and no lock of the block cache, which a parent thread may have held
    // at the fork).
    memory_shutdown();
    state_.watcher().forget_after_fork();
    state_.forget_after_fork();
    Timing::forget_after_fork();
    state_.mark_broken(std::move(error));
    return false;
  }

 private:
  // Null (cudaStreamLegacy's spelling in the runtime API), cudaStreamLegacy and
  // cudaStreamPerThread: what they are; null for any other stream.
  static const char* special_stream(cudaStream_t handle) noexcept {
    if (handle == nullptr || handle == cudaStreamLegacy) return "legacy default stream";
    if (handle == cudaStreamPerThread) return "per-thread default stream";
    return nullptr;
  }

  const Device device_;
  CudaDevice state_;
  std::unique_ptr<ops::Kernels> kernels_;
  CudaNativeEvents native_events_{device_};
  std::mutex wrap_mu_;
  std::unordered_map<unsigned long long, std::weak_ptr<CudaStream>> wrapped_;
};

}  // namespace

std::string explain_no_device(cudaError_t status, int driver_version, int runtime_version,
                              const char* visible_devices) {
  // CUDA's name for what it said goes right after the words that explain it.
  const std::string code = " (cudaGetDeviceCount: " + std::string(cudaGetErrorName(status)) + " = " +
                           std::to_string(static_cast<int>(status)) + ")";
  const std::string use_cpu = "use the CPU, device \"cpu\" (EVENTIDE_DEVICE=cpu makes it the default)";
  const std::string none_here = ", so there are no cuda:N devices here: " + use_cpu;
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  // The runtime reads a missing libcuda as a driver too old for it; cudaDriverGetVersion
  // tells the two apart (0: no driver).
  if (status == cudaErrorInsufficientDriver && driver_version == 0) {
    return "no NVIDIA driver or GPU was found on this machine" + code + none_here;
  }
  if (status == cudaErrorNoDevice || status == cudaSuccess) {  // success: a count of 0
    if (visible_devices != nullptr) {
      return std::string("no GPU that CUDA_VISIBLE_DEVICES=\"") + visible_devices + "\" names was found" +
             code + none_here;
    }
    return "no NVIDIA GPU was found on this machine (its NVIDIA driver, for CUDA " + version(driver_version) +
           ", sees none)" + code + none_here;
  }
  if (status == cudaErrorStubLibrary) {
    return "no NVIDIA driver was found on this machine, only the CUDA toolkit's stub libcuda, for "
           "linking only" + code + none_here;
  }
  if (status == cudaErrorInsufficientDriver) {
    return "the NVIDIA driver supports CUDA up to " + version(driver_version) + ", older than the CUDA " +
           version(runtime_version) + " runtime of this build of eventide" + code +
           ": update the driver, or " + use_cpu;
  }
  return "no CUDA device could be used: " + describe(status) + "; " + use_cpu;
}

std::string explain_missing_device(int count, const char* visible_devices) {
  std::string have;
  if (count <= 0) {
    have = "no CUDA device";
  } else if (count == 1) {
    have = "1 CUDA device, cuda:0";
  } else if (count == 2) {
    have = "2 CUDA devices, cuda:0 and cuda:1";
  } else {
    have = std::to_string(count) + " CUDA devices, cuda:0 to cuda:" + std::to_string(count - 1);
  }
  if (visible_devices != nullptr) {
    return "this process sees " + have + " (CUDA_VISIBLE_DEVICES=" + visible_devices +
           ", numbered from 0 in that order)";
  }
  return "this machine has " + have;
}

std::vector<std::unique_ptr<detail::DeviceBackend>> discover() {
  std::vector<std::unique_ptr<detail::DeviceBackend>> out;
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    int driver_version = 0, runtime_version = 0;
    (void)cudaDriverGetVersion(&driver_version);
    (void)cudaRuntimeGetVersion(&runtime_version);
    g_why_none = explain_no_device(st, driver_version, runtime_version, std::getenv("CUDA_VISIBLE_DEVICES"));
    return out;
  }
  g_device_count = count;
  for (int i = 0; i < count; ++i) {
    try {
      out.push_back(std::make_unique<CudaBackend>(i));
    } catch (const std::exception& e) {
      g_setup_failures[i] = e.what();
    }
  }
  return out;
}

std::string why_unavailable(Device device) {
  if (!g_why_none.empty()) return g_why_none;
  if (auto failed = g_setup_failures.find(device.index()); failed != g_setup_failures.end()) {
    return device.str() + " was found but could not be set up: " + failed->second;
  }
  return explain_missing_device(g_device_count, std::getenv("CUDA_VISIBLE_DEVICES"));
}

namespace {
constexpr int kDLCUDA = 2;  // dlpack.h's DLDeviceType
}  // namespace

ops::Kernels& kernels_of(detail::DeviceBackend& device) {
  return static_cast<CudaBackend&>(device).kernels();
}

constinit const detail::BackendDescriptor kDescriptor{
    .kind = "cuda",
    .indexing = detail::DeviceIndexing::indexed,
    .default_priority = 100,
    .dlpack_device_type = kDLCUDA,
    .dlpack_also_reads = {},
    .discover = &discover,
    .why_unavailable = &why_unavailable,
    .has_native_streams = true,
};

}  // namespace eventide::backends::cuda
