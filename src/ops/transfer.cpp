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
// Every op runs on its own device's current stream, with the body that device's kernels
// made; they are ordered by the hazards of the tensors they share (the staging
// tensor's producer is A's op, which B's op reads), so the copy is asynchronous, ordered
// after the source's producer, and fails (naming the cause) if that failed, whichever
// devices take part. No backend enqueues work on another's stream.
#include <memory>
#include <string>
#include <utility>

#include "core/runtime.hpp"
#include "core/tensor_state.hpp"
#include "ops/kernels.hpp"

namespace eventide::ops {

std::shared_ptr<TensorState> transfer(TensorState& src, Device to) {
  auto& rt = detail::Runtime::get();
  detail::DeviceContext& from = rt.context(src.device);
  detail::DeviceContext& into = rt.context(to);  // InvalidArgument if it is not here
  Kernels& source = kernels(from);
  const std::size_t bytes = src.nbytes();
  const std::string name = "to(" + to.str() + ")";
  auto src_stream = rt.current_stream(src.device);
  if (source.copies_directly_to(to)) {
    // The destination's memory is the destination stream's from an "empty" op there; the copy
    // runs on the source's stream, ordered after it (and after src's producer).
    auto dst_stream = rt.current_stream(to);
    auto out = std::make_shared<TensorState>(src.shape, src.dtype, to, into.backend().allocate(bytes, *dst_stream));
    Body copy = source.copy_direct(*src_stream, src, *out);  // (may refuse: before any launch)
    launch(*dst_stream, "empty", {}, {out.get()}, Body{});
    launch(*src_stream, name.c_str(), {&src}, {out.get()}, std::move(copy));
    return out;
  }
  if (to.is_cpu()) {
    auto out = std::make_shared<TensorState>(src.shape, src.dtype, to, from.backend().allocate_host(bytes));
    launch(*src_stream, name.c_str(), {&src}, {out.get()}, source.download_async(*src_stream, src, *out));
    return out;
  }
  auto dst_stream = rt.current_stream(to);
  auto out = std::make_shared<TensorState>(src.shape, src.dtype, to, into.backend().allocate(bytes, *dst_stream));
  detail::DeviceContext& stager = src.device.is_cpu() ? into : from;
  auto staging = std::make_shared<TensorState>(src.shape, src.dtype, Device::cpu(),
                                               stager.backend().allocate_host(bytes));
  // Both bodies first: either device may refuse, and then nothing is enqueued.
  Body down = source.download_async(*src_stream, src, *staging);
  Body up = kernels(into).upload_async(*dst_stream, *staging, *out);
  launch(*src_stream, "stage", {&src}, {staging.get()}, std::move(down));
  launch(*dst_stream, name.c_str(), {staging.get()}, {out.get()}, std::move(up));
  return out;
}

}  // namespace eventide::ops
