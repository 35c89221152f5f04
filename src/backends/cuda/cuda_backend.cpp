#include "backends/cuda/cuda_backend.hpp"

#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_matmul.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"
#include "ops/kernels.hpp"
#include "ops/philox.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::Callback;
using detail::StreamState;
using detail::TensorState;

std::string g_why_none;  // why discover() found no device

CudaStream& native(StreamState& s) { return static_cast<CudaStream&>(s); }

[[noreturn]] void unsupported(const char* op, DType dtype, const char* supported) {
  throw InvalidArgument(std::string(op) + " does not support " + std::string(name(dtype)) +
                        " on cuda (supported: " + supported + ")");
}

class CudaKernels final : public ops::Kernels {
 public:
  explicit CudaKernels(CudaDevice& device) : device_(device) {}

  void fill(StreamState& s, TensorState& out, double value) override {
    check_usable();
    Ref<Storage> mem = out.storage;
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    cudaStream_t stream = native(s).handle();
    s.launch("fill", {}, {&out}, [=] { kernels::fill(mem->data(), n, dtype, value, stream); });
  }

  void random(StreamState& s, TensorState& out, ops::RandomKind kind,
              const ops::ReserveRandom& reserve) override {
    check_usable();
    const bool normal = kind == ops::RandomKind::normal;
    if (!is_floating(out.dtype)) unsupported(normal ? "randn" : "rand", out.dtype, "f32, f64, f16, bf16");
    auto [seed, offset] = reserve(ops::philox::blocks_for(out.numel, out.dtype == DType::f64, normal));
    Ref<Storage> mem = out.storage;
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    cudaStream_t stream = native(s).handle();
    s.launch(normal ? "randn" : "rand", {}, {&out},
             [=] {
               kernels::random(mem->data(), n, dtype,
                               normal ? kernels::Distribution::normal : kernels::Distribution::uniform,
                               seed, offset, stream);
             });
  }

  void binary(StreamState& s, ops::BinaryOp op, TensorState& a, TensorState& b,
              TensorState& out) override {
    check_usable();
    Ref<Storage> ma = a.storage, mb = b.storage, mo = out.storage;
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    cudaStream_t stream = native(s).handle();
    s.launch(ops::name(op), {&a, &b}, {&out},
             [=] {
               kernels::binary(op == ops::BinaryOp::add ? kernels::BinaryKind::add : kernels::BinaryKind::mul,
                               ma->data(), mb->data(), mo->data(), n, dtype, stream);
             });
  }

  void matmul(StreamState& s, TensorState& a, TensorState& b, TensorState& out) override {
    check_usable();
    if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16 && a.dtype != DType::f64) {
      unsupported("matmul", a.dtype, "f32, f16, bf16, f64");
    }
    const bool batched = a.shape.size() == 3;
    const MatmulShape shape{batched ? a.shape[0] : 1, a.shape[batched ? 1 : 0],
                            a.shape[batched ? 2 : 1], b.shape[batched ? 2 : 1]};
    CudaStream& cs = native(s);
    Ref<Storage> ma = a.storage, mb = b.storage, mo = out.storage;
    Ref<Storage> ws = cs.workspace(kMatmulWorkspace);
    const DType dtype = a.dtype;
    const bool tf32 = allow_tf32() && dtype == DType::f32;
    const int index = device_.device().index();
    cudaStream_t stream = cs.handle();
    s.launch(tf32 ? "matmul[tf32]" : "matmul", {&a, &b}, {&out}, [=] {
      cuda::matmul(index, stream, ma->data(), mb->data(), mo->data(), shape, dtype, tf32,
                   ws->data(), ws->bytes());
    });
  }

  void upload(StreamState& s, TensorState& out, const void* host) override {
    check_usable();
    // Through pinned staging: the caller's memory is copied now (they may reuse it at once),
    // the transfer to the device runs in stream order.
    const std::size_t bytes = out.nbytes();
    Ref<Storage> staging = allocate_pinned(bytes);
    if (bytes > 0) std::memcpy(staging->data(), host, bytes);
    Ref<Storage> mo = out.storage;
    cudaStream_t stream = native(s).handle();
    s.launch("from_host", {}, {&out}, [=] {
      check(cudaMemcpyAsync(mo->data(), staging->data(), bytes, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync", "(host to " + mo->device().str() + ")");
    });
  }

  void download(const TensorState& src, void* host) override {
    check_usable();
    // The producer has finished; copy through pinned staging on the device's transfer stream.
    const std::size_t bytes = src.nbytes();
    if (bytes == 0) return;
    use_device(device_.device());
    Ref<Storage> staging = allocate_pinned(bytes);
    TransferStream::Use transfer = device_.transfer().use();  // the stream lives while it is used
    cudaStream_t stream = transfer.get();
    check(cudaMemcpyAsync(staging->data(), src.storage->data(), bytes, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync", "(" + src.device.str() + " to host)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "(copy from " + src.device.str() + ")");
    std::memcpy(host, staging->data(), bytes);
  }

  void copy(StreamState& s, TensorState& src, TensorState& dst) override {
    check_usable();
    Ref<Storage> ms = src.storage, md = dst.storage;
    const std::size_t bytes = src.nbytes();
    cudaStream_t stream = native(s).handle();
    s.launch("copy", {&src}, {&dst}, [=] {
      check(cudaMemcpyAsync(md->data(), ms->data(), bytes, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync", "(device to device)");
    });
  }

  void download_async(StreamState& s, TensorState& src, TensorState& host) override {
    // Into host memory that is pinned where it came from this device (allocate_host), so
    // that the copy is truly asynchronous; the CUDA op is its producer.
    check_usable();
    const std::size_t bytes = src.nbytes();
    Ref<Storage> ms = src.storage, mh = host.storage;
    cudaStream_t h = native(s).handle();
    s.launch("to(cpu)", {&src}, {&host}, [=] {
      check(cudaMemcpyAsync(mh->data(), ms->data(), bytes, cudaMemcpyDeviceToHost, h),
            "cudaMemcpyAsync", "(" + ms->device().str() + " to host)");
    });
  }

  void upload_async(StreamState& s, TensorState& host, TensorState& out) override {
    // `host` may still be being written by host-side work (a cpu op staging it): the op is
    // held until that has finished (cuda_stream.hpp), then copied in stream order.
    check_usable();
    const std::size_t bytes = out.nbytes();
    Ref<Storage> mh = host.storage, mo = out.storage;
    cudaStream_t h = native(s).handle();
    s.launch("to(" + out.device.str() + ")", {&host}, {&out}, [=] {
      check(cudaMemcpyAsync(mo->data(), mh->data(), bytes, cudaMemcpyHostToDevice, h),
            "cudaMemcpyAsync", "(host to " + mo->device().str() + ")");
    });
  }

  std::shared_ptr<TensorState> copy_direct(TensorState& src, Device to) override {
    if (!to.is_cuda()) return nullptr;
    // GPU to another GPU, peer to peer: the destination's memory is the destination stream's
    // from an "empty" op; the copy runs on the source's stream, ordered after it.
    check_usable();
    auto& rt = detail::Runtime::get();
    const std::size_t bytes = src.nbytes();
    auto dst_stream = rt.current_stream(to);
    auto out = std::make_shared<TensorState>(src.shape, src.dtype, to,
                                             rt.context(to).backend().allocate(bytes, *dst_stream));
    dst_stream->launch("empty", {}, {out.get()}, Callback());
    auto stream = rt.current_stream(src.device);
    Ref<Storage> ms = src.storage, mo = out->storage;
    cudaStream_t h = native(*stream).handle();
    const int from = src.device.index(), into = to.index();
    stream->launch("to(" + to.str() + ")", {&src}, {out.get()}, [=] {
      check(cudaMemcpyPeerAsync(mo->data(), into, ms->data(), from, bytes, h), "cudaMemcpyPeerAsync",
            "(cuda:" + std::to_string(from) + " to cuda:" + std::to_string(into) + ")");
    });
    return out;
  }

 private:
  void check_usable() const {
    if (auto e = device_.broken()) std::rethrow_exception(e);
  }

  CudaDevice& device_;
};

class CudaBackend final : public detail::DeviceBackend {
 public:
  explicit CudaBackend(int index)
      : device_(Device::cuda(index)), state_(device_), kernels_(state_) {
    configure_pool(device_);
  }

  Device device() const override { return device_; }

  DeviceInfo info() const override {
    const cudaDeviceProp& p = state_.props();
    std::string desc = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                       ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
                       std::to_string(p.totalGlobalMem >> 20) + " MiB; timelines: " +
                       state_.progress().describe() +
                       "; op times: " + Timing::get().describe() + "; matmul: cuBLASLt" +
                       (allow_tf32() ? " (TF32 allowed)" : "");
    return DeviceInfo{device_, p.name, desc};
  }

  std::shared_ptr<StreamState> create_stream(std::uint64_t id) override {
    return std::make_shared<OwnedCudaStream>(device_, id, state_);
  }

  std::shared_ptr<StreamState> wrap_stream(void* native_stream,
                                           const std::function<std::uint64_t()>& make_id) override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    auto handle = static_cast<cudaStream_t>(native_stream);
    // Null is the legacy default stream in the runtime API; named explicitly, so that the
    // wrapper's native handle is never null (null means "no native stream" to the core).
    if (handle == nullptr) handle = cudaStreamLegacy;
    use_device(device_);
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
    return allocate_device(device_, bytes, native(stream).handle());
  }

  Ref<Storage> allocate_host(std::size_t bytes) override { return allocate_pinned(bytes); }

  ops::Kernels& kernels() override { return kernels_; }

  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept override {
    state_.stop(deadline);
    memory_shutdown();
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
  CudaKernels kernels_;
  std::mutex wrap_mu_;
  std::unordered_map<unsigned long long, std::weak_ptr<CudaStream>> wrapped_;
};

}  // namespace

std::vector<std::unique_ptr<detail::DeviceBackend>> discover() {
  std::vector<std::unique_ptr<detail::DeviceBackend>> out;
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    g_why_none = "no CUDA device could be used: " + describe(st);
    return out;
  }
  if (count == 0) {
    g_why_none = "no CUDA device is present";
    return out;
  }
  for (int i = 0; i < count; ++i) {
    try {
      out.push_back(std::make_unique<CudaBackend>(i));
    } catch (const std::exception& e) {
      g_why_none += "cuda:" + std::to_string(i) + " could not be set up: " + e.what() + "; ";
    }
  }
  return out;
}

std::string why_unavailable(Device) {
  if (!g_why_none.empty()) return g_why_none;
  int count = 0;
  cudaGetDeviceCount(&count);
  return "this machine has " + std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s");
}

namespace {
constexpr int kDLCUDA = 2;  // dlpack.h's DLDeviceType
}  // namespace

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
