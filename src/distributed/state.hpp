// What the communicators of a process share (eventide/distributed.hpp): a communicator's state
// and the chains that order its transports' calls (communicator.cpp issues the collectives on
// them), and the process's list of communicators and MPI, which init, finalize and the exit
// and fork steps keep (process.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/work.hpp"
#include "distributed/transport.hpp"
#include "eventide/device.hpp"
#include "eventide/distributed.hpp"
#include "eventide/errors.hpp"
#if EVENTIDE_WITH_MPI
#include "distributed/mpi.hpp"
#endif

namespace eventide::distributed::detail {

namespace rt = eventide::detail;

// Whether this process is a fork() of the one whose communicators these are: MPI and NCCL
// are that process's, and may not be used here (process.cpp).
bool in_forked_child() noexcept;

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

// The process's state, made at the first call (never destroyed: finalize() runs at exit,
// before statics go).
Process& process();

// finalize() for the exit steps too (ExitStep: the communicators alone, or MPI as well).
bool finalize(std::chrono::nanoseconds timeout, ExitStep step);

}  // namespace eventide::distributed::detail
