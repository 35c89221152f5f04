// eventide/distributed.hpp: collectives across processes (and GPUs) as stream ops.
//
// A Communicator joins the processes of a job, one *rank* each, launched by `mpirun`:
//
//   auto comm = ev::distributed::init();          // rank and size from mpirun
//   ev::Tensor g = compute_gradients();             // on comm.device()
//   ev::Tensor sum = comm.all_reduce(g);            // an op on the current stream: returns at once
//   ev::Event done;
//   done.record(sum);                               // tied to the collective
//   done.wait();
//
// Every collective is an eventide op on the current stream of its tensor's device, like
// `add` or `matmul`: it is ordered after the ops that produced its input, events recorded on
// its output are tied to it, other streams wait on it, `time_elapsed` times it (from its
// start on this rank to its end: the wait for the slowest peer included), callbacks and
// `co_await`/`await` work, and the profiler draws it. Tensors on a GPU go through NCCL (on the
// native stream, with no host round trip); tensors on the CPU go through MPI (on the stream's
// worker thread).
//
// Order. Every rank must issue a communicator's collectives (and its sends and receives) in
// the same order, as with MPI and NCCL. eventide keeps the order of the calls: each one is
// ordered after the previous one of the same transport (NCCL's on the GPU, MPI's on the CPU),
// whatever streams they are on, so collectives of one transport never overlap each other
// (they overlap the other work of the streams; an MPI and a NCCL collective may run at once).
//
// Failure. A collective whose input failed (or whose stream is broken) is issued all the
// same, since its peers would otherwise wait for it forever: its output and its events then
// fail here with that error, while the peers' outputs hold an undefined contribution from
// this rank (they do not fail: nothing tells them). A rank that learns of a failure should
// stop the job. A rank that dies or never issues a collective leaves its peers' collective
// waiting: host waits with timeouts (Event::wait_for) return, the GPU's NCCL kernel does not.
//
// Thread-safety: a Communicator is a cheap handle; its members may be called from any
// thread, and calls from several threads take effect in some order, which must be the same
// on every rank. Lifetime: the process's communicator lives until finalize() or process
// exit, which tears it down (and ends MPI, where eventide started it) once its work is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/event.hpp"
#include "eventide/tensor.hpp"

namespace eventide::distributed {

namespace detail {
class CommunicatorState;
}

// How all_reduce and reduce_scatter combine the ranks' elements. `avg` is for floating
// dtypes only.
enum class ReduceOp { sum, prod, max, min, avg };
// "sum", ...
const char* name(ReduceOp op) noexcept;

// What this build and this process can do.
struct Capabilities {
  bool mpi = false;   // built with MPI (EVENTIDE_WITH_MPI): init() and CPU tensors
  bool nccl = false;  // built with NCCL (EVENTIDE_WITH_NCCL): CUDA tensors
  // Whether the process was launched by mpirun (or another MPI launcher) with more than one
  // rank, from the launcher's environment.
  bool launched = false;
};
Capabilities capabilities();

struct InitOptions {
  // The GPU whose tensors this rank's collectives carry (through NCCL). Default: where the
  // default device is a GPU (default_device(); EVENTIDE_DEVICE=cpu makes it the CPU),
  // cuda:(local rank), the local rank being the rank among the job's processes on this
  // machine (InvalidArgument if they outnumber its GPUs: NCCL needs one per rank); else none
  // (CPU tensors only). Device::cpu() asks for no GPU.
  std::optional<Device> device;
};

// @code
//   auto comm = ev::distributed::init();
//   ev::Tensor g = ev::ones({1024}, ev::DType::f32, comm.device());
//   ev::Tensor sum = comm.all_reduce(g);  // an op on the current stream: returns at once
//   ev::Tensor avg = comm.all_reduce(g, ev::distributed::ReduceOp::avg);
//   sum.wait();                           // every element is comm.size()
// @endcode
class Communicator {
 public:
  int rank() const;
  int size() const;
  // This rank's GPU, or cpu where it has none: barrier() runs on it.
  Device device() const;
  // "nccl" for the GPU's tensors, "mpi" for the CPU's; "" where there is none.
  std::string transport(Device device) const;
  // Nanoseconds to add to this process's steady clock to read rank 0's (0 on rank 0; about 0
  // for ranks on rank 0's machine), measured at init: profiles of all ranks put on one clock.
  std::int64_t clock_offset_ns() const;
  // "Communicator(rank 0 of 2, cuda:0 nccl, cpu mpi)".
  std::string str() const;

  // Every element reduced over the ranks: a new tensor of t's shape, dtype and device. Every
  // rank passes a tensor of the same shape and dtype.
  Tensor all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) const;
  // The ranks' tensors concatenated along the first dimension, in rank order: shape
  // [size * d0, d1, ...] (a 0-d tensor gathers to [size]).
  Tensor all_gather(const Tensor& t) const;
  // all_reduce, then rank r keeps the r-th of `size` equal parts along the first dimension:
  // shape [d0 / size, d1, ...]. InvalidArgument unless size divides d0.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::sum) const;
  // A new tensor holding `root`'s t on every rank. Every rank passes a tensor of the same
  // shape and dtype; only the root's contents are read.
  Tensor broadcast(const Tensor& t, int root = 0) const;
  // The same four into `out`, which they return: a tensor of the result's shape, dtype and
  // device (InvalidArgument naming the difference otherwise), written by the op as by any op
  // (it waits for out's earlier readers and writer; the writer's failure is not its own, as it
  // overwrites out whole). all_reduce and broadcast may run in place: out is t itself (not
  // another tensor over t's memory); otherwise out must not share memory with t, nor be
  // read-only. Each new tensor holds memory of its own until its op is done; collectives issued
  // back to back into one `out` hold one buffer, as the libraries' own calls into a buffer do.
  Tensor all_reduce(const Tensor& t, ReduceOp op, const Tensor& out) const;
  Tensor all_gather(const Tensor& t, const Tensor& out) const;
  Tensor reduce_scatter(const Tensor& t, ReduceOp op, const Tensor& out) const;
  Tensor broadcast(const Tensor& t, int root, const Tensor& out) const;
  // Sends t to rank `dst`, which receives it with recv(). Returns an event recorded on the op:
  // it finishes once t's data has left (t may then be reused).
  Event send(const Tensor& t, int dst) const;
  // A new tensor of `shape` and `dtype` on `device` (default: the communicator's device),
  // received from rank `src`'s send().
  Tensor recv(Shape shape, int src, DType dtype = DType::f32,
              std::optional<Device> device = std::nullopt) const;
  // An op on the current stream of device() that finishes when every rank has reached its
  // own barrier (on a GPU, an all_reduce of one element, as NCCL has no barrier). wait() on
  // the returned event for a barrier of the host.
  Event barrier() const;

  friend bool operator==(const Communicator& a, const Communicator& b) noexcept {
    return a.state_ == b.state_;
  }

  // For the runtime and bindings.
  explicit Communicator(std::shared_ptr<detail::CommunicatorState> state) noexcept
      : state_(std::move(state)) {}
  const std::shared_ptr<detail::CommunicatorState>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::CommunicatorState> state_;
};

// The process's communicator over every rank of the job (MPI_COMM_WORLD), made on the first
// call: starts MPI if nothing has (MPI_Init_thread; a program that started it itself, or
// mpi4py, is fine), and, for a GPU, makes the NCCL communicator, its unique id sent over MPI.
// Blocks until every rank has called it. Later calls return the same communicator
// (InvalidArgument if they ask for another device). StateError where this build has no MPI,
// or after finalize(); DeviceError if MPI or NCCL fails.
//
// @code
//   ev::distributed::Communicator comm = ev::distributed::init();  // under mpirun
//   std::printf("%s\n", comm.str().c_str());  // Communicator(rank 0 of 2, cuda:0 nccl, cpu mpi)
// @endcode
Communicator init(InitOptions options = {});
// Whether init() has made the process's communicator (and finalize() has not ended it).
bool is_initialized() noexcept;
// One process driving several GPUs: a communicator per device, ranks 0..n-1 in the order
// given (ncclCommInitAll; needs NCCL, not MPI). NCCL needs each of them driven by its own
// host thread (one thread issuing collectives of several of them would wait on itself).
// InvalidArgument for a device that is not a CUDA GPU, or one named twice.
//
// @code
//   auto comms = ev::distributed::init_local({ev::Device::cuda(0), ev::Device::cuda(1)});
//   std::vector<std::thread> threads;
//   for (const auto& c : comms)  // a host thread each
//     threads.emplace_back([c] { c.barrier().wait(); });
//   for (auto& t : threads) t.join();
// @endcode
std::vector<Communicator> init_local(const std::vector<Device>& devices);
// Ends the process's communicators (init()'s and init_local()'s): later collectives throw
// StateError; waits (up to `timeout`) for the ones already issued, then tears down NCCL and
// ends MPI where init() started it, and returns true. If some are still running then (a rank
// never issued its part), it leaves NCCL and MPI as they are and returns false: tearing them
// down under a running collective could hang or crash. A timeout beyond the clock's range
// (nanoseconds::max()) is no limit. Called at process exit by itself (a 10 s wait), unless it
// was called before; idempotent.
//
// @code
//   if (!ev::distributed::finalize(std::chrono::seconds(30)))
//     std::fprintf(stderr, "collectives still running: NCCL and MPI left as they are\n");
// @endcode
bool finalize(std::chrono::nanoseconds timeout = std::chrono::seconds(10));
// What an exit step ends: the communicators (their collectives waited for, NCCL torn down),
// or all (MPI too).
enum class ExitStep { communicators, all };
// Process exit's finalize(): its 10 s wait, or, where finalize() was called before (and gave
// up), no wait, so that an exit waits once. The Python package's exit step calls it for the
// communicators while the runtime still runs; the exit hook init() registers (glibc's on_exit)
// ends MPI after it, or, where the process exits with a failure status, ends the job
// (abort_job_on_error): its peers may be waiting for this rank.
void finalize_at_exit(ExitStep step = ExitStep::all);
// For a rank that leaves on an error (an unhandled exception): its peers would wait for its
// collectives forever, and MPI_Finalize at exit for them, so the whole job ends now, as
// MPI_Abort ends it, after a line on stderr naming the rank and `reason`. Does nothing and
// returns false where there are no peers (no init(), one rank, no MPI, after finalize); else
// does not return. The Python package calls it from sys.excepthook once init() has run, and
// the exit hook for a failure status.
bool abort_job_on_error(int code, std::string_view reason) noexcept;

}  // namespace eventide::distributed
