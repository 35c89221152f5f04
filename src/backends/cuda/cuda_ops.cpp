#include "backends/cuda/cuda_ops.hpp"

#include <cstring>
#include <string>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_matmul.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "core/capture.hpp"
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

// "(host to cuda:0)", "(cuda:0 to host)", "(within cuda:0)": built only once a copy has failed
// (building it inline also draws a false -Wrestrict from GCC 12).
[[gnu::cold, gnu::noinline]] std::string copy_direction(cudaMemcpyKind kind, Device device) {
  if (kind == cudaMemcpyDeviceToDevice) return "(within " + device.str() + ")";
  std::string what = kind == cudaMemcpyHostToDevice ? "(host to " : "(";
  what += device.str();
  what += kind == cudaMemcpyHostToDevice ? ")" : " to host)";
  return what;
}

// Issues one copy between the host and `device`, or within it, on `stream`; a CUDA error
// names the direction.
void copy_on(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
             cudaStream_t stream, Device device) {
  const cudaError_t e = cudaMemcpyAsync(to, from, bytes, kind, stream);
  if (e != cudaSuccess) [[unlikely]] check(e, "cudaMemcpyAsync", copy_direction(kind, device));
}

// The body of a copy of `bytes` between host and device memory on `stream`; `device` is the
// GPU's, for the message.
detail::Callback copy_async(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream, Device device) {
  return [=] { copy_on(to, from, bytes, kind, stream, device); };
}

class CudaKernels final : public ops::Kernels {
 public:
  explicit CudaKernels(CudaDevice& device) : device_(device) {}

  ops::Body fill(StreamState& s, const TensorState& out, double value) override {
    check_usable();
    void* p = out.storage->data();
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = [=] { kernels::fill(p, n, dtype, value, stream); }, .capture_epoch = epoch};
  }

  ops::Body random(StreamState& s, const TensorState& out, ops::RandomKind kind,
                   const ops::ReserveRandom& reserve) override {
    check_usable();
    const bool normal = kind == ops::RandomKind::normal;
    if (!is_floating(out.dtype)) unsupported(normal ? "randn" : "rand", out.dtype, "f32, f64, f16, bf16");
    const ops::philox::Draw draw = reserve(ops::philox::blocks_for(out.numel, out.dtype == DType::f64, normal));
    void* p = out.storage->data();
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = [=] {
              kernels::random(p, n, dtype, normal ? kernels::Distribution::normal : kernels::Distribution::uniform,
                              draw, stream);
            },
            .capture_epoch = epoch};
  }

  ops::Body binary(StreamState& s, ops::BinaryOp op, const TensorState& a, const TensorState& b,
                   const TensorState& out) override {
    check_usable();
    const void* pa = a.storage->data();
    const void* pb = b.storage->data();
    void* po = out.storage->data();
    const std::int64_t n = out.numel;
    const DType dtype = out.dtype;
    const kernels::BinaryKind k = kind_of(op);
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = [=] { kernels::binary(k, pa, pb, po, n, dtype, stream); }, .capture_epoch = epoch};
  }

  ops::Body cast(StreamState& s, const TensorState& src, const TensorState& out) override {
    check_usable();
    const void* in = src.storage->data();
    void* po = out.storage->data();
    const std::int64_t n = out.numel;
    const DType from = src.dtype, to = out.dtype;
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = [=] { kernels::cast(in, from, po, to, n, stream); }, .capture_epoch = epoch};
  }

  ops::Body matmul(StreamState& s, const TensorState& a, const TensorState& b,
                   const TensorState& out) override {
    check_usable();
    if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16 && a.dtype != DType::f64) {
      unsupported("matmul", a.dtype, "f32, f16, bf16, f64");
    }
    const bool batched = a.shape.size() == 3;
    const MatmulShape shape{batched ? a.shape[0] : 1, a.shape[batched ? 1 : 0],
                            a.shape[batched ? 2 : 1], b.shape[batched ? 2 : 1]};
    CudaStream& cs = as_cuda_stream(s);
    const void* pa = a.storage->data();
    const void* pb = b.storage->data();
    void* po = out.storage->data();
    // In a capture, the graph's workspace, one for all its matmuls (its ops run one after
    // another, and so do its replays): a replay may run beside this stream's later matmuls,
    // which use the stream's.
    Ref<Storage> ws;
    if (s.in_capture()) [[unlikely]] {
      if (auto c = s.capture()) {
        ws = c->shared_scratch(kMatmulWorkspace, [&](std::size_t bytes) { return cs.allocate(bytes); });
      }
    }
    if (!ws) ws = cs.workspace(kMatmulWorkspace);
    void* wp = ws->data();
    const std::size_t wbytes = ws->bytes();
    const DType dtype = a.dtype;
    const bool tf32 = allow_tf32() && dtype == DType::f32;
    const int index = device_.device().index();
    const auto [stream, epoch] = cs.launch_target();
    return {.run = [=] { cuda::matmul(index, stream, pa, pb, po, shape, dtype, tf32, wp, wbytes); },
            .keep = std::move(ws),
            .name = tf32 ? "matmul[tf32]" : nullptr,
            .capture_epoch = epoch};
  }

  ops::Body upload(StreamState& s, const TensorState& out, const void* host) override {
    check_usable();
    // Through pinned staging: the caller's memory is copied now (they may reuse it at once),
    // the transfer to the device runs in stream order.
    const std::size_t bytes = out.nbytes();
    Ref<Storage> staging = allocate_pinned(bytes);
    if (bytes > 0) std::memcpy(staging->data(), host, bytes);
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = copy_async(out.storage->data(), staging->data(), bytes, cudaMemcpyHostToDevice, stream,
                              out.device),
            .keep = std::move(staging),
            .capture_epoch = epoch};
  }

  ops::Body write_words(StreamState& s, const TensorState& out, std::uint64_t first, std::uint64_t second) override {
    // An upload stages what it copies: the words are the body's, and `out` is written only
    // in stream order, after the ops before it have read it.
    const std::uint64_t words[2] = {first, second};
    return upload(s, out, words);
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
    copy_on(staging->data(), src.storage->data(), bytes, cudaMemcpyDeviceToHost, stream, src.device);
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) [[unlikely]] {
      check(e, "cudaStreamSynchronize", [&] { return "(copy from " + src.device.str() + ")"; });
    }
    std::memcpy(host, staging->data(), bytes);
  }

  ops::Body download_async(StreamState& s, const TensorState& src, const TensorState& host) override {
    // Into host memory that is pinned where it came from this device (allocate_host), so
    // that the copy is truly asynchronous.
    check_usable();
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = copy_async(host.storage->data(), src.storage->data(), src.nbytes(), cudaMemcpyDeviceToHost,
                              stream, src.device),
            .capture_epoch = epoch};
  }

  ops::Body upload_async(StreamState& s, const TensorState& host, const TensorState& out) override {
    // `host` may still be being written by host-side work (a cpu op staging it): the op is
    // held until that has finished (core/device_stream.hpp), then copied in stream order.
    check_usable();
    const auto [stream, epoch] = as_cuda_stream(s).launch_target();
    return {.run = copy_async(out.storage->data(), host.storage->data(), out.nbytes(), cudaMemcpyHostToDevice,
                              stream, out.device),
            .capture_epoch = epoch};
  }

  bool copies_directly_to(Device to) const override { return to.is_cuda(); }

  ops::Body copy_direct(StreamState& s, const TensorState& src, const TensorState& dst) override {
    // GPU to another GPU, peer to peer, on the source's stream; within one GPU a copy of the
    // device's own (which a CUDA graph capture records, where a peer copy is refused).
    check_usable();
    void* to = dst.storage->data();
    const void* from = src.storage->data();
    const std::size_t bytes = src.nbytes();
    const auto [h, epoch] = as_cuda_stream(s).launch_target();
    const int src_index = src.device.index(), dst_index = dst.device.index();
    if (src_index == dst_index) {
      return {.run = copy_async(to, from, bytes, cudaMemcpyDeviceToDevice, h, src.device), .capture_epoch = epoch};
    }
    return {.run = [=] {
      check(cudaMemcpyPeerAsync(to, dst_index, from, src_index, bytes, h), "cudaMemcpyPeerAsync",
            [&] { return "(cuda:" + std::to_string(src_index) + " to cuda:" + std::to_string(dst_index) + ")"; });
    }, .capture_epoch = epoch};
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
