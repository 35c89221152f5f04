// Copies between devices: one algorithm over each backend's copies to and from the host.
//
// A backend offers three things (ops/kernels.hpp): download_async (its tensor into host
// memory), upload_async (host memory into its tensor), and optionally copy_direct (a path of
// its own to another device: CUDA's peer copies between GPUs). A copy from device A to
// device B is then:
//
//   - A's direct path to B, where A has one;
//   - into the cpu: one op of A writes the cpu tensor, whose memory is A's host memory
//     (pinned, on a GPU, so that the copy is truly asynchronous);
//   - otherwise through a staging tensor in host memory: A downloads into it (when A is the
//     cpu, a copy on a cpu stream: the source may still be being produced there), and B
//     uploads from it. The staging memory is the host memory of whichever device is not the
//     cpu (the source's, between two non-cpu devices).
//
// Every op is enqueued by the backend of the stream it runs on, each on its own device's
// current stream; they are ordered by the hazards of the tensors they share (the staging
// tensor's producer is A's op, which B's op reads), so the copy is asynchronous, ordered
// after the source's producer, and fails (naming the cause) if that failed, whichever
// devices take part. No backend enqueues work on another's stream.
#include <memory>

#include "core/runtime.hpp"
#include "core/tensor_state.hpp"
#include "ops/kernels.hpp"

namespace eventide::ops {

std::shared_ptr<TensorState> transfer(TensorState& src, Device to) {
  auto& rt = detail::Runtime::get();
  detail::DeviceContext& from = rt.context(src.device);
  detail::DeviceContext& into = rt.context(to);  // InvalidArgument if it is not here
  if (auto direct = from.backend().kernels().copy_direct(src, to)) return direct;
  const std::size_t bytes = src.nbytes();
  if (to.is_cpu()) {
    auto out = std::make_shared<TensorState>(src.shape, src.dtype, to, from.backend().allocate_host(bytes));
    from.backend().kernels().download_async(*rt.current_stream(src.device), src, *out);
    return out;
  }
  auto dst_stream = rt.current_stream(to);
  auto out = std::make_shared<TensorState>(src.shape, src.dtype, to, into.backend().allocate(bytes, *dst_stream));
  detail::DeviceContext& stager = src.device.is_cpu() ? into : from;
  auto staging = std::make_shared<TensorState>(src.shape, src.dtype, Device::cpu(),
                                               stager.backend().allocate_host(bytes));
  from.backend().kernels().download_async(*rt.current_stream(src.device), src, *staging);
  into.backend().kernels().upload_async(*dst_stream, *staging, *out);
  return out;
}

}  // namespace eventide::ops
