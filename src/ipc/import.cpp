// The importing side of events across processes (eventide/ipc.hpp): import_event checks the
// block it is named (whose it is, who may write it, its size and fields: it trusts nothing
// another user could have written), then ties the event to the import's verdict on the host
// path, or to a GPU-side wait on the GPU path (gpu_path.hpp), and hands the import to the
// watcher (watcher.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/ipc.hpp"
#include "ipc/block.hpp"
#include "ipc/ends.hpp"
#include "ipc/gpu_path.hpp"
#include "ipc/liveness.hpp"
#include "ipc/watcher.hpp"

namespace eventide::ipc {

using namespace detail;  // this file is the module's own
using eventide::detail::Runtime;
using eventide::detail::WorkKind;

Event import_event(const std::string& handle, std::optional<Device> device) {
  Runtime& rt = Runtime::get();
  rt.check_running();
  const std::string name = name_from_handle(handle);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) {
      throw InvalidArgument("import_event: no exported event '" + handle +
                            "' on this machine: its exporter has dropped its ExportedEvent or "
                            "exited (or the handle comes from another machine)");
    }
    throw InvalidArgument("import_event: cannot open the block of '" + handle + "': " + errno_text(e));
  }
  struct FdGuard {  // until the import holds it
    int fd;
    ~FdGuard() {
      if (fd >= 0) ::close(fd);
    }
  } fd_guard{fd};
  // Trust: /dev/shm is a directory every user may create names in. Only a block this user made
  // (as an exporter does: mode 0600) and nobody else may write decides a verdict here; one of
  // another size could be truncated under the mapping (SIGBUS) or be something else.
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    throw InvalidArgument("import_event: cannot read the block of '" + handle + "': " + errno_text(e));
  }
  if (st.st_uid != ::geteuid()) {
    throw InvalidArgument("import_event: the block of '" + handle + "' belongs to another user (uid " +
                          std::to_string(st.st_uid) + ", this process is uid " + std::to_string(::geteuid()) +
                          "): eventide imports only events exported by the same user, since another "
                          "user could forge its verdict");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw InvalidArgument("import_event: the block of '" + handle + "' may be written by other users (mode " +
                          std::to_string(st.st_mode & 0777) + " in decimal; eventide makes it 0600): refused, "
                          "since they could forge its verdict");
  }
  if (st.st_size != static_cast<off_t>(sizeof(Block))) {
    throw InvalidArgument("import_event: '" + handle + "' names shared memory that is not an eventide event block (" +
                          std::to_string(st.st_size) + " bytes, not " + std::to_string(sizeof(Block)) + ")");
  }
  void* address = ::mmap(nullptr, sizeof(Block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    const int e = errno;
    throw InvalidArgument("import_event: cannot map the block of '" + handle + "': " + errno_text(e));
  }
  auto map = std::make_shared<Mapping>(address);
  const Block& b = map->block();
  if (b.magic != kMagic) {
    throw InvalidArgument("import_event: '" + handle + "' names shared memory that is not an eventide event block");
  }
  if (b.version != kVersion || b.block_bytes != sizeof(Block)) {
    throw InvalidArgument("import_event: the block of '" + handle + "' is of another version of eventide (" +
                          std::to_string(b.version) + "; this one reads " + std::to_string(kVersion) + ")");
  }
  // Every field bounded: a pid no process has (0, -1: kill(2) would ask about a group, and the
  // liveness check would never end the wait), lengths past their arrays.
  if (b.pid <= 0 || b.native_bytes > sizeof b.native || b.error_bytes > sizeof b.error) {
    throw InvalidArgument("import_event: the block of '" + handle + "' is malformed (pid " + std::to_string(b.pid) +
                          ", native handle of " + std::to_string(b.native_bytes) + " bytes, error text of " +
                          std::to_string(b.error_bytes) + " bytes)");
  }
  // A finished export whose exporter is gone (SIGKILLed: it could not remove its name) is no
  // export any more, as after a clean exit: its name goes, and the import is refused.
  if (b.state.load(std::memory_order_acquire) & kFinal) {
    if (exporter_gone(b, fd, b.pid, b.start_time)) {
      ::shm_unlink(name.c_str());
      throw InvalidArgument("import_event: no exported event '" + handle + "' on this machine: its exporter (process " +
                            std::to_string(b.pid) + ") has exited, and its block was left behind (removed now)");
    }
  }
  std::optional<Device> exporter_device;
  if (b.device[0] != '\0') {
    try {
      exporter_device = Device(std::string_view(b.device, strnlen(b.device, sizeof b.device)));
    } catch (const Error&) {
      // A kind this build lacks: the host path serves it.
    }
  }
  Device target = Device::cpu();
  if (device) {
    target = *device;
  } else if (exporter_device && rt.find(*exporter_device)) {
    target = *exporter_device;
  }
  (void)rt.context(target);  // InvalidArgument if unavailable

  const bool has_native = b.native_bytes > 0 && b.native_bytes <= sizeof b.native;
  const bool gpu = has_native && !target.is_cpu();
  if (gpu) {
    if (!exporter_device || exporter_device->kind() != target.kind()) {
      throw InvalidArgument("import_event: '" + handle + "' is an event of " + std::string(b.device) +
                            ", which " + target.str() +
                            " cannot wait for on the device; import it on the CPU (the host path) or "
                            "on a device of its kind");
    }
    if (b.pid == ::getpid()) {
      throw InvalidArgument("import_event: '" + handle + "' was exported by this process: a GPU event "
                            "cannot be imported on a GPU by its own process (CUDA refuses it); wait on "
                            "the exported Event itself, or import it on the CPU");
    }
  }

  auto imp = std::make_shared<Import>();
  imp->map = map;
  imp->lock_fd = std::exchange(fd_guard.fd, -1);
  imp->name = name;
  imp->handle = handle;
  imp->pid = b.pid;
  imp->start_time = b.start_time;
  imp->timeline = eventide::detail::make_ref<Timeline>("import of " + handle + " from process " +
                                                       std::to_string(b.pid));
  imp->gate = eventide::detail::make_ref<Work>(imp->timeline, "gpu record", WorkKind::host);
  imp->gate->set_seq(1);
  imp->verdict = eventide::detail::make_ref<Work>(imp->timeline, "verdict", WorkKind::host);
  imp->verdict->set_seq(2);
  imp->next_liveness = std::chrono::steady_clock::now();  // checked at once

  if (gpu) {
    Event out = import_on_gpu(imp, target);
    Watcher::get().add(std::move(imp));
    return out;
  }
  // The host path: the verdict alone (the gate is not used).
  Event out(target, EventOptions{false});
  settle(*imp->gate, nullptr);
  imp->gate_done = true;
  imp->timeline->advance(1);
  out.state()->record(imp->verdict, std::nullopt);
  // An export that is over already reads so at once (poll() right after the import was
  // False in 162 of 200 imports: it waited for the watcher's turn).
  if (Watcher::settle_now_if_over(*imp)) return out;
  Watcher::get().add(std::move(imp));
  return out;
}

}  // namespace eventide::ipc
