// The communicator (eventide/distributed.hpp): argument checks, outputs, and collectives as
// ops on the current stream, whose bodies call the tensor's device's transport
// (transport.hpp: MPI for the CPU, NCCL for a GPU).
//
// Order: each transport's ops form a chain. An op is launched with the previous op of its
// chain as a dependency (DepKind::order: no failure propagates), under the chain's lock, so
// that the transport's calls happen one at a time in the order of the user's calls, on any
// streams. On a GPU the wait is the GPU's (or, for one still held on the host, the new op is
// held too, and launched after it); on the CPU the stream's worker waits.
//
// Lifetime: a communicator's state (and its transports) lives in the process's list until
// finalize() (or process exit) ends them all, once their last ops have finished: an op's body
// refers to its transport by a plain pointer. Making and ending them is in process.cpp; what
// both share, in state.hpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <string_view>
#include <utility>

#include "core/event_state.hpp"
#include "core/parker.hpp"
#include "core/runtime.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "distributed/state.hpp"
#include "distributed/transport.hpp"
#include "eventide/distributed.hpp"
#include "eventide/errors.hpp"
#include "eventide/profiler.hpp"
#include "eventide/stream.hpp"

namespace eventide::distributed {

namespace rt = eventide::detail;

using detail::Chain;
using detail::CommunicatorState;
using detail::Transport;

namespace {

CommunicatorState& state_of(const std::shared_ptr<CommunicatorState>& s) {
  if (!s) throw InvalidArgument("Communicator: the communicator is empty");
  return *s;
}

std::string dims(const Shape& shape) { return to_string(shape); }

// What every collective does: checks, output, launch in its chain's order.
struct Issue {
  CommunicatorState& comm;
  std::string op;
  Device device;
  std::shared_ptr<Transport> owner;  // keeps the transport while this call uses it
  Transport& transport;
  std::shared_ptr<rt::StreamState> stream;

  Issue(CommunicatorState& c, std::string name, Device on)
      : comm(c),
        op(std::move(name)),
        device(on),
        owner(c.transport_for(on, op)),
        transport(*owner),
        stream((rt::Runtime::get().check_running(), rt::Runtime::get().current_stream(on))) {
    // A collective must be issued on every rank; one that eventide would have to launch from
    // its own thread (held behind host-side work) could not be, on a stream that is another
    // one on each thread.
    if (!stream->launches_from_any_thread()) {
      throw InvalidArgument(op + ": cannot be issued on " + stream->name() +
                            ", a per-thread default stream: eventide may have to launch a collective "
                            "from its own thread; use a stream of your own");
    }
  }

  void check_count(std::int64_t count) const {
    if (static_cast<std::uint64_t>(count) > transport.max_count()) {
      throw InvalidArgument(op + ": " + std::to_string(count) + " elements are more than " +
                            transport.name() + " carries in one call (" +
                            std::to_string(transport.max_count()) + "); split the tensor");
    }
  }

  std::shared_ptr<rt::TensorState> output(Shape shape, DType dtype) const {
    check_shape(op, shape, dtype);
    const std::size_t bytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
    auto storage = rt::Runtime::get().context(device).backend().allocate(bytes, *stream);
    return std::make_shared<rt::TensorState>(std::move(shape), dtype, device, std::move(storage));
  }

  // The caller's `into` as the output of `shape` (in's dtype), checked: its device, dtype and
  // shape are the result's, and it is `in` itself (where `in_place`) or apart from in's memory.
  std::shared_ptr<rt::TensorState> given_output(const rt::TensorState& in, const Shape& shape,
                                                const Tensor& into, bool in_place) const {
    if (!into.defined()) throw InvalidArgument(op + ": out is undefined");
    const std::shared_ptr<rt::TensorState>& out = into.state();
    if (out->device != in.device) {
      throw InvalidArgument(op + ": out is on " + out->device.str() + ", the tensor on " + in.device.str());
    }
    if (out->dtype != in.dtype) {
      throw InvalidArgument(op + ": out has dtype " + std::string(name(out->dtype)) + ", the result " +
                            std::string(name(in.dtype)));
    }
    if (out->shape != shape) {
      throw InvalidArgument(op + ": out has shape " + dims(out->shape) + ", the result " + dims(shape));
    }
    if (out->storage->access() == Access::read_only) {
      throw InvalidArgument(op + ": out is read-only memory (lent as read-only by another library)");
    }
    // In place is the input tensor itself: another tensor over its memory would keep the
    // op's read and write apart, each ordered against its own tensor's users only.
    if (out.get() == &in) {
      if (!in_place) throw InvalidArgument(op + ": out is the input, and " + op + " cannot run in place");
      return out;
    }
    const auto* a = static_cast<const char*>(in.storage->data());
    const auto* b = static_cast<const char*>(out->storage->data());
    const std::size_t a_bytes = static_cast<std::size_t>(in.numel) * itemsize(in.dtype);
    const std::size_t b_bytes = static_cast<std::size_t>(out->numel) * itemsize(out->dtype);
    const bool overlap = a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
    if (overlap) {
      throw InvalidArgument(op + ": out overlaps the input's memory through another tensor" +
                            (in_place ? std::string(" (to run in place, pass the input itself as out)") : ""));
    }
    return out;
  }

  // The shape of the collectives that read `in` and write a tensor: the output (a new tensor
  // of `shape`, in's dtype, or the caller's `into`), then `call(transport, src, dst, dtype,
  // native stream)` launched as the op.
  template <class Call>
  Tensor produce(rt::TensorState& in, Shape shape, const Tensor* into, bool in_place, Call call) {
    auto out = into ? given_output(in, shape, *into, in_place) : output(std::move(shape), in.dtype);
    const DType dtype = in.dtype;
    const void* src = in.storage->data();
    void* dst = out->storage->data();
    // Into a caller's out other than the input: out is overwritten whole, and a failure of its
    // earlier writer is not this collective's.
    const bool overwrites = into && out.get() != &in;
    launch({&in}, {out.get()}, [=](Transport& tr, void* stream) { call(tr, src, dst, dtype, stream); },
           overwrites);
    return Tensor(std::move(out));
  }

  // Launches `call(transport, native stream)` as the op, after the chain's last, and makes it
  // the chain's last.
  template <class Call>
  rt::Ref<rt::Work> launch(std::initializer_list<rt::TensorState*> reads,
                           std::initializer_list<rt::TensorState*> writes, Call call,
                           bool overwrites = false) {
    Chain& chain = comm.chain_of(transport);
    std::lock_guard lock(chain.mu);
    // (Again under the chain's lock, which finalize() takes to end the communicator: nothing
    // is issued after it has started to drain the chain.)
    if (comm.ended.load(std::memory_order_acquire)) {
      throw StateError(op + ": the communicator has been finalized");
    }
    rt::LaunchOptions options;
    options.after = chain.last;
    options.must_issue = true;
    options.overwrites = overwrites;
    // The launch keeps the memory of the tensors until the body has run; the transport
    // outlives it (see the top).
    Transport* t = &transport;
    void* native = stream->native_handle();
    auto work = stream->launch(op, reads, writes,
                               [t, native, call = std::move(call)]() mutable {
                                 // Work queued before a fork() runs in the child too: not this.
                                 if (detail::in_forked_child()) {
                                   throw StateError("a collective queued before fork() cannot run in the child");
                                 }
                                 call(*t, native);
                               },
                               options);
    chain.last = work;
    return work;
  }
};

rt::TensorState& input(const Tensor& t, const std::string& op) {
  if (!t.defined()) throw InvalidArgument(op + ": the tensor is undefined");
  return *t.state();
}

void check_reduction(const Issue& issue, DType dtype, ReduceOp op) {
  if (std::string why = issue.transport.refuses(dtype, op); !why.empty()) {
    throw InvalidArgument(issue.op + ": " + why);
  }
}

void check_rank(const CommunicatorState& c, const std::string& op, const char* role, int r) {
  if (r < 0 || r >= c.size) {
    throw InvalidArgument(op + ": " + role + " " + std::to_string(r) + " is not a rank of this communicator (0 to " +
                          std::to_string(c.size - 1) + ")");
  }
}

Event event_on(rt::Ref<rt::Work> work, Device device) {
  Event e(device);
  e.state()->record(std::move(work), device);
  return e;
}

}  // namespace

const char* name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

Capabilities capabilities() {
  Capabilities c;
#if EVENTIDE_WITH_MPI
  c.mpi = true;
  c.launched = detail::launched_by_mpi_launcher();
#endif
#if EVENTIDE_WITH_NCCL
  c.nccl = true;
#endif
  return c;
}

// --- Communicator ------------------------------------------------------------------------

int Communicator::rank() const { return state_of(state_).rank; }
int Communicator::size() const { return state_of(state_).size; }
Device Communicator::device() const { return state_of(state_).device; }
std::int64_t Communicator::clock_offset_ns() const { return state_of(state_).clock_offset_ns; }

std::string Communicator::transport(Device on) const {
  CommunicatorState& s = state_of(state_);
  if (on.is_cpu()) return s.cpu ? s.cpu->name() : "";
  std::shared_ptr<Transport> g = s.gpu();
  return g && on == s.device ? g->name() : "";
}

std::string Communicator::str() const {
  CommunicatorState& s = state_of(state_);
  std::string out = "Communicator(rank " + std::to_string(s.rank) + " of " + std::to_string(s.size);
  if (std::shared_ptr<Transport> g = s.gpu()) out += ", " + s.device.str() + " " + g->name();
  if (s.cpu) out += std::string(", cpu ") + s.cpu->name();
  if (s.ended.load()) out += ", finalized";
  return out + ")";
}

namespace {

Tensor all_reduce_into(CommunicatorState& s, const Tensor& t, ReduceOp op, const Tensor* into) {
  rt::TensorState& in = input(t, "all_reduce");
  Issue issue(s, "all_reduce", in.device);
  check_reduction(issue, in.dtype, op);
  issue.check_count(in.numel);
  const auto count = static_cast<std::size_t>(in.numel);
  return issue.produce(in, in.shape, into, true, [=](Transport& tr, const void* src, void* dst, DType dtype, void* stream) {
    tr.all_reduce(src, dst, count, dtype, op, stream);
  });
}

Tensor all_gather_into(CommunicatorState& s, const Tensor& t, const Tensor* into) {
  rt::TensorState& in = input(t, "all_gather");
  Issue issue(s, "all_gather", in.device);
  issue.check_count(in.numel);
  Shape shape = in.shape;
  if (shape.empty()) {
    shape = {s.size};
  } else if (__builtin_mul_overflow(shape[0], static_cast<std::int64_t>(s.size), &shape[0])) {
    throw InvalidArgument("all_gather: shape " + dims(in.shape) + " times " + std::to_string(s.size) +
                          " ranks is too large to address");
  }
  const auto count = static_cast<std::size_t>(in.numel);
  return issue.produce(in, std::move(shape), into, false, [=](Transport& tr, const void* src, void* dst, DType dtype, void* stream) {
    tr.all_gather(src, dst, count, dtype, stream);
  });
}

Tensor reduce_scatter_into(CommunicatorState& s, const Tensor& t, ReduceOp op, const Tensor* into) {
  rt::TensorState& in = input(t, "reduce_scatter");
  Issue issue(s, "reduce_scatter", in.device);
  check_reduction(issue, in.dtype, op);
  if (in.shape.empty() || in.shape[0] % s.size != 0) {
    throw InvalidArgument("reduce_scatter: the first dimension of shape " + dims(in.shape) +
                          " must be a multiple of the " + std::to_string(s.size) + " ranks");
  }
  Shape shape = in.shape;
  shape[0] /= s.size;
  const std::int64_t each = in.numel / s.size;  // the elements of the output
  issue.check_count(each);
  const auto count = static_cast<std::size_t>(each);
  return issue.produce(in, std::move(shape), into, false, [=](Transport& tr, const void* src, void* dst, DType dtype, void* stream) {
    tr.reduce_scatter(src, dst, count, dtype, op, stream);
  });
}

Tensor broadcast_into(CommunicatorState& s, const Tensor& t, int root, const Tensor* into) {
  rt::TensorState& in = input(t, "broadcast");
  check_rank(s, "broadcast", "root", root);
  Issue issue(s, "broadcast", in.device);
  issue.check_count(in.numel);
  const auto count = static_cast<std::size_t>(in.numel);
  return issue.produce(in, in.shape, into, true, [=](Transport& tr, const void* src, void* dst, DType dtype, void* stream) {
    tr.broadcast(src, dst, count, dtype, root, stream);
  });
}

}  // namespace

Tensor Communicator::all_reduce(const Tensor& t, ReduceOp op) const {
  return all_reduce_into(state_of(state_), t, op, nullptr);
}
Tensor Communicator::all_reduce(const Tensor& t, ReduceOp op, const Tensor& out) const {
  return all_reduce_into(state_of(state_), t, op, &out);
}
Tensor Communicator::all_gather(const Tensor& t) const { return all_gather_into(state_of(state_), t, nullptr); }
Tensor Communicator::all_gather(const Tensor& t, const Tensor& out) const {
  return all_gather_into(state_of(state_), t, &out);
}
Tensor Communicator::reduce_scatter(const Tensor& t, ReduceOp op) const {
  return reduce_scatter_into(state_of(state_), t, op, nullptr);
}
Tensor Communicator::reduce_scatter(const Tensor& t, ReduceOp op, const Tensor& out) const {
  return reduce_scatter_into(state_of(state_), t, op, &out);
}
Tensor Communicator::broadcast(const Tensor& t, int root) const {
  return broadcast_into(state_of(state_), t, root, nullptr);
}
Tensor Communicator::broadcast(const Tensor& t, int root, const Tensor& out) const {
  return broadcast_into(state_of(state_), t, root, &out);
}

Event Communicator::send(const Tensor& t, int dst) const {
  CommunicatorState& s = state_of(state_);
  rt::TensorState& in = input(t, "send");
  check_rank(s, "send", "dst", dst);
  if (dst == s.rank) throw InvalidArgument("send: dst " + std::to_string(dst) + " is this rank");
  Issue issue(s, "send", in.device);
  issue.check_count(in.numel);
  const std::size_t count = static_cast<std::size_t>(in.numel);
  const DType dtype = in.dtype;
  void* src = in.storage->data();
  auto work = issue.launch({&in}, {}, [=](Transport& tr, void* stream) {
    tr.send(src, count, dtype, dst, stream);
  });
  return event_on(std::move(work), in.device);
}

Tensor Communicator::recv(Shape shape, int src, DType dtype, std::optional<Device> device) const {
  CommunicatorState& s = state_of(state_);
  check_rank(s, "recv", "src", src);
  if (src == s.rank) throw InvalidArgument("recv: src " + std::to_string(src) + " is this rank");
  Issue issue(s, "recv", device.value_or(s.device));
  // Before the allocation: 2^40 elements were refused as out of memory, not as too many.
  issue.check_count(eventide::numel(shape));
  auto out = issue.output(std::move(shape), dtype);
  const std::size_t count = static_cast<std::size_t>(out->numel);
  void* dst = out->storage->data();
  issue.launch({}, {out.get()}, [=](Transport& tr, void* stream) {
    tr.recv(dst, count, dtype, src, stream);
  });
  return Tensor(std::move(out));
}

Event Communicator::barrier() const {
  CommunicatorState& s = state_of(state_);
  Issue issue(s, "barrier", s.device);
  if (s.device.is_cpu()) {
    auto work = issue.launch({}, {}, [](Transport& tr, void* stream) { tr.barrier(stream); });
    return event_on(std::move(work), s.device);
  }
  // NCCL has no barrier: an all_reduce of one element, which no rank finishes before every
  // rank has started it.
  auto scratch = issue.output({1}, DType::i32);
  void* p = scratch->storage->data();
  auto work = issue.launch({}, {scratch.get()}, [p](Transport& tr, void* stream) {
    tr.all_reduce(p, p, 1, DType::i32, ReduceOp::max, stream);
  });
  return event_on(std::move(work), s.device);
}

}  // namespace eventide::distributed
