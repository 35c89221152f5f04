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
// refers to its transport by a plain pointer.
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
#include "core/fork.hpp"
#include "core/parker.hpp"
#include "core/runtime.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "distributed/transport.hpp"
#include "eventide/distributed.hpp"
#include "eventide/errors.hpp"
#include "eventide/profiler.hpp"
#include "eventide/stream.hpp"
#if EVENTIDE_WITH_MPI
#include "distributed/mpi.hpp"
#endif
#if EVENTIDE_WITH_NCCL
#include "distributed/nccl.hpp"
#endif

namespace eventide::distributed {

namespace rt = eventide::detail;

namespace detail {

namespace {
// Whether this process is a fork() of the one whose communicators these are: MPI and NCCL
// are that process's, and may not be used here (set in the child by the distributed stage of
// fork's steps, core/fork.hpp, set with the process's state, before any communicator can exist).
std::atomic<bool> g_forked_child{false};

bool in_forked_child() noexcept { return g_forked_child.load(std::memory_order_relaxed); }

}  // namespace

// One transport's ops, in the order they were issued.
struct Chain {
  rt::RuntimeMutex mu;
  rt::Ref<rt::Work> last;  // the latest op (under mu)
};

class CommunicatorState {
 public:
  int rank = 0;
  int size = 1;
  Device device = Device::cpu();
  std::int64_t clock_offset_ns = 0;
  Transport* cpu = nullptr;  // MPI's (the world owns it, and frees its MPI objects only
                             // once MPI may no longer be called), or null
  Chain cpu_chain;
  Chain gpu_chain;
  std::atomic<bool> ended{false};

  void set_gpu(std::shared_ptr<Transport> t) {
    std::lock_guard lock(gpu_mu_);
    gpu_ = std::move(t);
  }
  // NCCL's on `device`, or null (after finalize() too). Callers keep it while they use it.
  std::shared_ptr<Transport> gpu() const {
    std::lock_guard lock(gpu_mu_);
    return gpu_;
  }

  // The transport of `on`'s tensors, kept alive by the pointer returned. InvalidArgument
  // where there is none; StateError after finalize().
  std::shared_ptr<Transport> transport_for(Device on, const std::string& op) {
    if (ended.load(std::memory_order_acquire)) {
      throw StateError(op + ": the communicator has been finalized");
    }
    if (in_forked_child()) {
      throw StateError(op + ": this process is a fork() of the one that made the communicator; "
                       "MPI and NCCL cannot be used in a forked child");
    }
    if (on.is_cpu()) {
      if (cpu) return std::shared_ptr<Transport>(std::shared_ptr<Transport>(), cpu);  // (not owned)
      throw InvalidArgument(op + ": this communicator has no transport for cpu tensors (it was made "
                            "by init_local, which has no MPI); use init() under mpirun");
    }
    std::shared_ptr<Transport> g = gpu();
    if (g && on == device) return g;
    if (ended.load(std::memory_order_acquire)) {
      throw StateError(op + ": the communicator has been finalized");
    }
    if (g) {
      throw InvalidArgument(op + ": the tensor is on " + on.str() + ", this rank's GPU is " +
                            device.str() + "; move it with .to(\"" + device.str() + "\")");
    }
    throw InvalidArgument(op + ": this communicator has no GPU (its device is " + device.str() +
                          "), so it cannot carry a tensor on " + on.str());
  }
  Chain& chain_of(const Transport& t) noexcept { return &t == cpu ? cpu_chain : gpu_chain; }

 private:
  mutable std::mutex gpu_mu_;
  std::shared_ptr<Transport> gpu_;
};

namespace {

// The process's communicators and MPI.
struct Process {
  std::mutex mu;
#if EVENTIDE_WITH_MPI
  std::unique_ptr<MpiWorld> world;
#endif
  std::shared_ptr<CommunicatorState> main;                  // init()'s
  std::vector<std::shared_ptr<CommunicatorState>> all;      // init()'s and init_local()'s
  bool exit_hook = false;
  // init() has made `main` and finalize() has not been called: read without `mu`, which
  // init() and finalize() hold across waits for the other ranks.
  std::atomic<bool> initialized{false};
  bool finalized = false;  // finalize() was called: no communicator may be made or used
  bool torn_down = false;  // ... and NCCL and MPI were ended (a later call retries until then)
  bool gave_up = false;    // a finalize() found collectives running (and said so)
  // MPI is up, with peers that may wait for this rank (init() made `main`), and not finished:
  // read without `mu` by abort_job_on_error.
  std::atomic<bool> mpi_up{false};
};

Process& process() {
  // Never destroyed: finalize() runs at exit, before statics go.
  static Process* p = [] {
    rt::set_fork_steps(rt::ForkStage::distributed,
                       {.child = []() noexcept { g_forked_child.store(true, std::memory_order_relaxed); }});
    return new Process;
  }();
  return *p;
}

}  // namespace
}  // namespace detail

namespace detail {
bool finalize(std::chrono::nanoseconds timeout, ExitStep step);
}

void finalize_at_exit(ExitStep step) {
  // One wait at exit: where finalize() ran already (the Python package's exit step, then
  // C++'s, or the program's own call) and gave up, a second wait of the full time made the
  // exit that much longer; it only looks whether the collectives have finished meanwhile.
  bool called_before;
  {
    detail::Process& p = detail::process();
    std::lock_guard lock(p.mu);
    called_before = p.finalized;
  }
  detail::finalize(called_before ? std::chrono::nanoseconds(0) : std::chrono::nanoseconds(std::chrono::seconds(10)),
                   step);
}

bool abort_job_on_error(int code, std::string_view reason) noexcept {
#if EVENTIDE_WITH_MPI
  detail::Process& p = detail::process();
  // Not under p.mu: finalize() holds it while it waits for collectives, which may be the very
  // wait this rank's error leaves unfinished. `world` is set once, by init(), before
  // `mpi_up` is.
  if (!p.mpi_up.load(std::memory_order_acquire) || detail::in_forked_child()) return false;
  detail::MpiWorld* world = p.world.get();
  if (!world || world->size() <= 1) return false;  // nobody waits for this rank
  char line[512];
  std::snprintf(line, sizeof line,
                "eventide: rank %d of %d leaves on an error (%.*s): ending the job (MPI_Abort), "
                "since the other ranks would wait for its collectives forever\n",
                world->rank(), world->size(), static_cast<int>(std::min<std::size_t>(reason.size(), 300)),
                reason.data());
  std::fputs(line, stderr);
  std::fflush(stderr);
  world->abort_job(code);
#else
  (void)code;
  (void)reason;
#endif
  return false;
}

namespace detail {
namespace {

// The process's exit, with its status where the C library tells it (glibc's on_exit): a
// rank leaving with a failure status (sys.exit(1), exit(3)) leaves on an error, and ends the
// job rather than wait in MPI_Finalize for peers that may be waiting for it (as mpirun itself
// ends a job one of whose ranks exited so). Otherwise MPI ends as finalize() ends it.
[[maybe_unused]] void on_process_exit(int status, void*) {
  if (status != 0) {
    char reason[48];
    std::snprintf(reason, sizeof reason, "exit status %d", status);
    (void)distributed::abort_job_on_error(status, reason);  // returns where nobody waits
  }
  distributed::finalize_at_exit(ExitStep::all);
}

[[maybe_unused]] void register_exit_hook(Process& p) {
  if (!p.exit_hook) {
#if defined(__GLIBC__)
    ::on_exit(on_process_exit, nullptr);
#else
    std::atexit([] { on_process_exit(0, nullptr); });
#endif
    p.exit_hook = true;
  }
}

}  // namespace
}  // namespace detail

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

// --- Making and ending communicators -----------------------------------------------------

Communicator init(InitOptions options) {
#if !EVENTIDE_WITH_MPI
  (void)options;
  throw StateError("distributed::init: this build of eventide has no MPI (EVENTIDE_WITH_MPI was "
                   "OFF or no MPI was found), which init needs to join the processes of a job; "
                   "install MPI (Debian: libopenmpi-dev) and rebuild, or use init_local for "
                   "several GPUs of one process");
#else
  auto& p = detail::process();
  std::lock_guard lock(p.mu);
  if (p.finalized) throw StateError("distributed::init: the process's communicator was finalized");
  if (options.device && !options.device->is_cpu() && !is_available(*options.device)) {
    throw InvalidArgument("distributed::init: the device " + options.device->str() + " is not available");
  }
  if (options.device && !options.device->is_cpu() && options.device->kind() != DeviceKind::cuda) {
    throw InvalidArgument("distributed::init: " + options.device->str() +
                          " is not a CUDA GPU; collectives on GPUs go through NCCL");
  }
  if (p.main) {
    if (options.device && *options.device != p.main->device) {
      throw InvalidArgument("distributed::init: the communicator was made for " + p.main->device.str() +
                            ", not " + options.device->str());
    }
    return Communicator(p.main);
  }
  rt::Runtime::get().check_running();
  if (!p.world) {
    p.world = detail::MpiWorld::start();  // (kept if a later step refuses)
    detail::register_exit_hook(p);        // which ends MPI at exit, also then
  }
  auto s = std::make_shared<CommunicatorState>();
  s->rank = p.world->rank();
  s->size = p.world->size();
  s->cpu = &p.world->transport();
  // Every rank's choice of device, agreed: a rank that cannot start fails them all, rather
  // than leave the others waiting in the next collective step of init.
  Device device = Device::cpu();
  std::exception_ptr refused;
  try {
    if (options.device) {
      device = *options.device;
    } else if (default_device().kind() == DeviceKind::cuda) {
      // A GPU of its own per rank of this machine, as NCCL needs (it refuses two ranks on one).
      std::vector<Device> gpus;
      for (const Device& d : devices()) {
        if (d.kind() == DeviceKind::cuda) gpus.push_back(d);
      }
      const auto local = static_cast<std::size_t>(p.world->local_size());
      if (local > gpus.size()) {
        throw InvalidArgument("distributed::init: " + std::to_string(local) + " ranks run on this machine and it has " +
                              std::to_string(gpus.size()) + " CUDA device(s); NCCL needs a GPU of its own per rank: "
                              "launch at most " + std::to_string(gpus.size()) + " rank(s) per machine, or pass "
                              "device=cpu for CPU tensors alone (MPI)");
      }
      device = gpus[static_cast<std::size_t>(p.world->local_rank())];
    }
#if !EVENTIDE_WITH_NCCL
    if (!device.is_cpu()) {
      throw StateError("distributed::init: this build of eventide has no NCCL (EVENTIDE_WITH_NCCL), which "
                       "collectives on " + device.str() + " need; pass device=cpu for MPI alone");
    }
#endif
  } catch (...) {
    refused = std::current_exception();
  }
  if (!p.world->all_agree(!refused)) {
    if (refused) std::rethrow_exception(refused);
    throw StateError("distributed::init: another rank could not start (its error says why); no "
                     "communicator was made");
  }
  s->device = device;
#if EVENTIDE_WITH_NCCL
  if (!device.is_cpu()) s->set_gpu(detail::join_nccl(*p.world, device, s->rank, s->size));
#endif
  s->clock_offset_ns = p.world->measure_clock_offset();
  // Profiles taken from now on name this process by its rank and carry its clock offset, so
  // that `eventide trace merge` puts the ranks' traces on one clock.
  ProcessLabel label;
  label.rank = s->rank;
  label.size = s->size;
  label.clock_offset_ns = s->clock_offset_ns;
  Communicator comm(s);
  {
    // Every rank has joined; on a GPU this also makes NCCL connect the ranks now, where a
    // blocking connection cannot stall a stream or the device's watcher later. On a stream of
    // its own: the caller's current one may be held back or broken by unrelated work. Made
    // known only after it: an init() that throws leaves no communicator behind.
    Stream mine(device);
    StreamGuard own(mine);
    comm.barrier().wait();
  }
  set_process_label(std::move(label));
  p.main = s;
  p.all.push_back(std::move(s));
  p.initialized.store(true, std::memory_order_release);
  p.mpi_up.store(true, std::memory_order_release);
  return comm;
#endif
}

bool is_initialized() noexcept {
  return detail::process().initialized.load(std::memory_order_acquire);
}

std::vector<Communicator> init_local(const std::vector<Device>& devices) {
#if !EVENTIDE_WITH_NCCL
  (void)devices;
  throw StateError("distributed::init_local: this build of eventide has no NCCL (EVENTIDE_WITH_NCCL)");
#else
  if (devices.empty()) throw InvalidArgument("distributed::init_local: no devices given");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].kind() != DeviceKind::cuda) {
      throw InvalidArgument("distributed::init_local: " + devices[i].str() + " is not a CUDA GPU");
    }
    if (!is_available(devices[i])) {
      throw InvalidArgument("distributed::init_local: the device " + devices[i].str() + " is not available");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        throw InvalidArgument("distributed::init_local: " + devices[i].str() + " is named twice");
      }
    }
  }
  rt::Runtime::get().check_running();
  auto transports = detail::nccl_local(devices);
  auto& p = detail::process();
  std::lock_guard lock(p.mu);
  if (p.finalized) throw StateError("distributed::init_local: the process's communicators were finalized");
  std::vector<Communicator> out;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto s = std::make_shared<CommunicatorState>();
    s->rank = static_cast<int>(i);
    s->size = static_cast<int>(devices.size());
    s->device = devices[i];
    s->set_gpu(std::move(transports[i]));
    p.all.push_back(s);
    out.emplace_back(std::move(s));
  }
  detail::register_exit_hook(p);
  return out;
#endif
}

namespace {

// Whether the chain's last op has finished by `deadline` (none: however long it takes).
bool drained(Chain& chain, const rt::Deadline& deadline) {
  rt::Ref<rt::Work> last;
  {
    std::lock_guard lock(chain.mu);
    last = chain.last;
  }
  while (last && !last->done()) {
    if (rt::expired(deadline)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

bool finalize(std::chrono::nanoseconds timeout) { return detail::finalize(timeout, ExitStep::all); }

bool detail::finalize(std::chrono::nanoseconds timeout, ExitStep step) {
  auto& p = detail::process();
  std::lock_guard lock(p.mu);
  if (p.torn_down) return true;
  p.finalized = true;
  p.initialized.store(false, std::memory_order_release);
  if (detail::in_forked_child()) {
    // A fork()ed child (at its exit, too): MPI and NCCL are the parent's; ending them here
    // would hang (MPI_Finalize waits for the job) or break the parent's.
    for (auto& s : p.all) s->ended.store(true, std::memory_order_release);
    p.torn_down = true;
    return true;
  }
  // (Saturated: a timeout too long for the clock, nanoseconds::max() among them, is no limit.)
  const rt::Deadline deadline = rt::deadline_after(timeout);
  bool clean = true;
  for (auto& s : p.all) {
    std::scoped_lock chains(s->cpu_chain.mu, s->gpu_chain.mu);
    s->ended.store(true, std::memory_order_release);
  }
  for (auto& s : p.all) {
    clean = drained(s->cpu_chain, deadline) && clean;
    clean = drained(s->gpu_chain, deadline) && clean;
  }
  if (!clean) {
    // A collective still runs (a peer never came): tearing down under it could crash or hang.
    // The communicators are left as they are; the process may exit. (Said once.)
    if (!std::exchange(p.gave_up, true)) std::fputs("eventide: distributed::finalize: collectives are still running (a rank that never "
               "issued its part?); NCCL and MPI are left as they are\n",
               stderr);
    return false;
  }
  for (auto& s : p.all) s->set_gpu(nullptr);
  if (step == ExitStep::communicators) return true;  // MPI: the exit hook's, which knows the status
#if EVENTIDE_WITH_MPI
  p.mpi_up.store(false, std::memory_order_release);
  if (p.world) p.world->finish();
#endif
  p.torn_down = true;
  return true;
}

}  // namespace eventide::distributed
