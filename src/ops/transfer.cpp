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

namespace {

// What a copy between two devices takes: the devices' kernels and the two current streams.
struct Copy {
  detail::DeviceContext& from;
  detail::DeviceContext& into;
  Kernels& source;
  std::shared_ptr<StreamState> src_stream;
  std::shared_ptr<StreamState> dst_stream;
};

Copy copy_between(Device from, Device to) {
  auto& rt = detail::Runtime::get();
  detail::DeviceContext& f = rt.context(from);
  detail::DeviceContext& i = rt.context(to);  // InvalidArgument if it is not here
  Copy c{f, i, kernels(f), rt.current_stream(from), rt.current_stream(to)};
  // A copy within a device goes into other code's capture of its stream, as an op does.
  if (from == to) c.src_stream->sync_native_capture(true);
  if (from != to) {
    for (StreamState* s : {c.src_stream.get(), c.dst_stream.get()}) {
      s->refuse_in_capture("a copy from " + from.str() + " to " + to.str() +
                           " (a graph holds the work of one device)");
    }
  }
  return c;
}

// Launches the copy of `src` into `dst` (of src's shape and dtype, on c.into's device) by the
// path the header describes. `overwrites`: dst is written whole over earlier contents (its
// earlier writer orders the copy, its failure is not the copy's). `dst_is_host_memory`: dst,
// on the cpu, is host memory of src's device (allocate_host: pinned on a GPU), which its
// download may write directly; other cpu memory (a tensor of the cpu backend's, a NumPy
// array's) is staged, so that no GPU copy into pageable memory stalls the device's stream.
// `direct`: the direct path's body, made already (to()), else made here.
void launch_copy(Copy& c, TensorState& src, TensorState& dst, const char* name, bool overwrites,
                 bool dst_is_host_memory, Body* direct = nullptr) {
  const Device to = dst.device;
  if (c.source.copies_directly_to(to)) {
    Body body = direct ? std::move(*direct) : c.source.copy_direct(*c.src_stream, src, dst);
    launch(*c.src_stream, name, {&src}, {&dst}, std::move(body), overwrites);
    return;
  }
  if (to.is_cpu() && (dst_is_host_memory || src.device.is_cpu())) {
    launch(*c.src_stream, name, {&src}, {&dst}, c.source.download_async(*c.src_stream, src, dst), overwrites);
    return;
  }
  detail::DeviceContext& stager = src.device.is_cpu() ? c.into : c.from;
  auto staging = std::make_shared<TensorState>(src.shape, src.dtype, Device::cpu(),
                                               stager.backend().allocate_host(src.nbytes()));
  // Both bodies first: either device may refuse, and then nothing is enqueued.
  Body down = c.source.download_async(*c.src_stream, src, *staging);
  Body up = kernels(c.into).upload_async(*c.dst_stream, *staging, dst);
  launch(*c.src_stream, "stage", {&src}, {staging.get()}, std::move(down));
  launch(*c.dst_stream, name, {staging.get()}, {&dst}, std::move(up), overwrites);
}

}  // namespace

std::shared_ptr<TensorState> transfer(TensorState& src, Device to) {
  Copy c = copy_between(src.device, to);
  const std::size_t bytes = src.nbytes();
  const std::string name = "to(" + to.str() + ")";
  std::shared_ptr<TensorState> out;
  if (c.source.copies_directly_to(to)) {
    // The destination's memory is the destination stream's from an "empty" op there; the copy
    // runs on the source's stream, ordered after it (and after src's producer).
    out = std::make_shared<TensorState>(src.shape, src.dtype, to, c.into.backend().allocate(bytes, *c.dst_stream));
    Body copy = c.source.copy_direct(*c.src_stream, src, *out);  // may refuse: before any launch
    launch(*c.dst_stream, "empty", {}, {out.get()}, Body{});
    launch_copy(c, src, *out, name.c_str(), false, false, &copy);
    return out;
  }
  if (to.is_cpu()) {
    // Host memory of the source's device (pinned, on a GPU: the copy is truly asynchronous).
    out = std::make_shared<TensorState>(src.shape, src.dtype, to, c.from.backend().allocate_host(bytes));
  } else {
    out = std::make_shared<TensorState>(src.shape, src.dtype, to, c.into.backend().allocate(bytes, *c.dst_stream));
  }
  launch_copy(c, src, *out, name.c_str(), false, true);
  return out;
}

void transfer_into(TensorState& src, TensorState& dst) {
  Copy c = copy_between(src.device, dst.device);
  launch_copy(c, src, dst, "copy_", true, false);
}

}  // namespace eventide::ops
