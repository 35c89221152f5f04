// A process's communicators (eventide/distributed.hpp): making them (init, init_local),
// ending them (finalize, at exit too), and what a job of several processes needs so that no
// rank waits forever: a rank that leaves on an error ends the job (abort_job_on_error), and a
// forked child never touches its parent's MPI and NCCL.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "core/fork.hpp"
#include "core/parker.hpp"
#include "core/runtime.hpp"
#include "distributed/state.hpp"
#include "eventide/distributed.hpp"
#include "eventide/errors.hpp"
#include "eventide/profiler.hpp"
#include "eventide/stream.hpp"
#if EVENTIDE_WITH_NCCL
#include "distributed/nccl.hpp"
#endif

namespace eventide::distributed {

namespace rt = eventide::detail;

namespace detail {

namespace {

// Set in the child by the distributed stage of fork's steps (core/fork.hpp), set with the
// process's state, before any communicator can exist.
std::atomic<bool> g_forked_child{false};

}  // namespace

bool in_forked_child() noexcept { return g_forked_child.load(std::memory_order_relaxed); }

Process& process() {
  // Never destroyed: finalize() runs at exit, before statics go.
  static Process* p = [] {
    rt::set_fork_steps(rt::ForkStage::distributed,
                       {.child = []() noexcept { g_forked_child.store(true, std::memory_order_relaxed); }});
    return new Process;
  }();
  return *p;
}

}  // namespace detail



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
