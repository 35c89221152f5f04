#include "backends/cuda/cuda_ops.hpp"

#include <cstring>
#include <string>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_matmul.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"
#include "ops/philox.hpp"

namespace eventide::backends::cuda {

namespace {

using detail::Callback;
using detail::StreamState;
using detail::TensorState;

kernels::BinaryKind kind_of(ops::BinaryOp op) noexcept {
  switch (op) {
    case ops::BinaryOp::add: return kernels::BinaryKind::add;
    case ops::BinaryOp::sub: return kernels::BinaryKind::sub;
    case ops::BinaryOp::mul: return kernels::BinaryKind::mul;
    case ops::BinaryOp::div: return kernels::BinaryKind::div;
  }
  return kernels::BinaryKind::add;
}

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
    cudaStream_t stream = as_cuda_stream(s).handle();
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
    cudaStream_t stream = as_cuda_stream(s).handle();
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
    cudaStream_t stream = as_cuda_stream(s).handle();
    s.launch(ops::name(op), {&a, &b}, {&out},
             [=] {
               kernels::binary(kind_of(op), ma->data(), mb->data(), mo->data(), n, dtype, stream);
             });
  }

  void cast(StreamState& s, TensorState& src, TensorState& out) override {
    check_usable();
    Ref<Storage> ms = src.storage, mo = out.storage;
    const std::int64_t n = out.numel;
    const DType from = src.dtype, to = out.dtype;
    cudaStream_t stream = as_cuda_stream(s).handle();
    s.launch("cast", {&src}, {&out}, [=] { kernels::cast(ms->data(), from, mo->data(), to, n, stream); });
  }

  void matmul(StreamState& s, TensorState& a, TensorState& b, TensorState& out) override {
    check_usable();
    if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16 && a.dtype != DType::f64) {
      unsupported("matmul", a.dtype, "f32, f16, bf16, f64");
    }
    const bool batched = a.shape.size() == 3;
    const MatmulShape shape{batched ? a.shape[0] : 1, a.shape[batched ? 1 : 0],
                            a.shape[batched ? 2 : 1], b.shape[batched ? 2 : 1]};
    CudaStream& cs = as_cuda_stream(s);
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
    cudaStream_t stream = as_cuda_stream(s).handle();
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
    DeviceScope scope(device_.device());
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
    cudaStream_t stream = as_cuda_stream(s).handle();
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
    cudaStream_t h = as_cuda_stream(s).handle();
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
    cudaStream_t h = as_cuda_stream(s).handle();
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
    cudaStream_t h = as_cuda_stream(*stream).handle();
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

}  // namespace

std::unique_ptr<ops::Kernels> make_kernels(CudaDevice& device) {
  return std::make_unique<CudaKernels>(device);
}

}  // namespace eventide::backends::cuda
