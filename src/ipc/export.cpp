// The exporting side of events across processes (eventide/ipc.hpp): export_event makes the
// shared block (block.hpp), takes the liveness lock (liveness.hpp), records the native event
// on the GPU path (gpu_path.hpp), and sets the state word from the exported work's
// completion; the ExportedEvent's owner removes the block's name when the last copy goes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/event_state.hpp"
#include "core/fork.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"
#include "eventide/ipc.hpp"
#include "ipc/block.hpp"
#include "ipc/ends.hpp"
#include "ipc/gpu_path.hpp"
#include "ipc/liveness.hpp"
#include "ipc/watcher.hpp"

namespace eventide::ipc {

namespace detail {

OwnedNames& owned_names() {
  static OwnedNames* names = [] {
    auto* n = new OwnedNames;  // never freed: used by the exit handler
    // fork(): the lock taken after the runtime has quiesced, the liveness locks' descriptors
    // closed in the child (core/fork.hpp, ForkStage::ipc_exports).
    eventide::detail::set_fork_steps(
        eventide::detail::ForkStage::ipc_exports,
        {.prepare = []() noexcept { owned_names().mu.lock(); },
         .parent = []() noexcept { owned_names().mu.unlock(); },
         .child = []() noexcept {
           OwnedNames& o = owned_names();
           for (int fd : o.lock_fds) ::close(fd);
           o.lock_fds.clear();
           o.mu.unlock();
         }});
    std::atexit([] {
      OwnedNames& o = owned_names();
      std::lock_guard lock(o.mu);
      if (o.pid != ::getpid()) return;  // a forked child's copy: the parent's names
      for (const std::string& name : o.names) ::shm_unlink(name.c_str());
      o.names.clear();
    });
    return n;
  }();
  return *names;
}

void ExportState::release_lock() noexcept {
  int fd = lock_fd.exchange(-1);
  if (fd < 0) return;
  OwnedNames& o = owned_names();
  std::lock_guard lock(o.mu);
  // In a forked child the handler has closed it already (and the number may be another's).
  if (o.lock_fds.erase(fd) > 0 && ::getpid() == pid) ::close(fd);
}

void ExportState::publish(std::uint32_t bits) const noexcept {
  if (::getpid() != pid) return;
  Block& b = map->block();
  b.state.fetch_or(bits, std::memory_order_release);
  futex_wake_all(&b.state);
}

void ExportState::publish_final(const std::exception_ptr& error) noexcept {
  if (::getpid() != pid) return;
  // (The liveness lock is kept until the export goes, ~ExportState: an importer that finds
  // the word final also learns from it whether the exporter is still there, so that a block
  // a killed exporter left behind is not taken for a live export.)
  if (!error) {
    publish(kDone);
    return;
  }
  Block& b = map->block();
  const char* text = eventide::detail::error_what(error);
  const std::size_t n = std::min(std::strlen(text), sizeof b.error);
  std::memcpy(b.error, text, n);
  b.error_bytes = static_cast<std::uint32_t>(n);
  publish(kFailed);
}

class ExportOwner {
 public:
  ExportOwner(std::string name, std::string handle, Event event, std::shared_ptr<ExportState> state)
      : name_(std::move(name)), handle_(std::move(handle)), event_(std::move(event)),
        state_(std::move(state)) {}
  ~ExportOwner() { close(); }
  ExportOwner(const ExportOwner&) = delete;
  ExportOwner& operator=(const ExportOwner&) = delete;

  void close() noexcept {
    if (closed_.exchange(true)) return;
    if (::getpid() != state_->pid) return;  // a forked child's copy
    ::shm_unlink(name_.c_str());
    OwnedNames& o = owned_names();
    std::lock_guard lock(o.mu);
    o.names.erase(name_);
  }
  const std::string& handle() const noexcept { return handle_; }
  const Event& event() const noexcept { return event_; }
  bool native() const noexcept { return state_->native != nullptr; }

 private:
  std::string name_;
  std::string handle_;
  Event event_;
  std::shared_ptr<ExportState> state_;
  std::atomic<bool> closed_{false};
};

}  // namespace detail

using namespace detail;  // this file is the module's own
using eventide::detail::EventState;
using eventide::detail::Runtime;

const std::string& ExportedEvent::handle() const {
  if (!owner_) throw StateError("ExportedEvent::handle: an empty ExportedEvent (default-made) has no handle");
  return owner_->handle();
}

Event ExportedEvent::event() const {
  if (!owner_) throw StateError("ExportedEvent::event: an empty ExportedEvent (default-made) has no event");
  return owner_->event();
}

bool ExportedEvent::native() const noexcept { return owner_ && owner_->native(); }

void ExportedEvent::close() noexcept {
  if (owner_) owner_->close();
}

ExportedEvent export_event(const Event& event) {
  Runtime& rt = Runtime::get();
  rt.check_running();
  const std::shared_ptr<EventState>& st = event.state();
  EventState::Snapshot snap = st->snapshot(EventState::SnapshotFor::export_all);
  if (snap.status == EventStatus::empty) {
    throw StateError("export_event: " + st->str() +
                     " is EMPTY: it would never finish; record work on it first");
  }
  const std::optional<Device> device = st->device();

  // The block.
  const std::string name = new_block_name();
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw Error("export_event: shm_open(\"" + name + "\") failed: " + errno_text(errno));
  }
  struct Unlink {  // until the name is handed to its owner
    const std::string* name;
    ~Unlink() {
      if (name) ::shm_unlink(name->c_str());
    }
  } unlink_on_error{&name};
  if (::ftruncate(fd, sizeof(Block)) != 0) {
    int e = errno;
    ::close(fd);
    throw Error("export_event: ftruncate of shared memory \"" + name + "\" failed: " + errno_text(e));
  }
  void* address = ::mmap(nullptr, sizeof(Block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  if (address == MAP_FAILED) {
    ::close(fd);
    throw Error("export_event: mmap of shared memory \"" + name + "\" failed: " + errno_text(e));
  }
  ::close(fd);
  auto state = std::make_shared<detail::ExportState>();
  state->map = std::make_shared<Mapping>(address);
  state->pid = ::getpid();
  // The liveness lock, on a descriptor of its own: a mapping holds the open file description
  // it was made from, so a lock on that one would live on in a forked child's copy of the
  // mapping after the exporter died.
  fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd >= 0 && take_liveness_lock(fd)) {
    OwnedNames& o = owned_names();
    std::lock_guard lock(o.mu);
    try {
      o.lock_fds.insert(fd);
      state->lock_fd.store(fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
    state->map->block().liveness_lock = 1;
  } else if (fd >= 0) {
    ::close(fd);  // no OFD locks here: importers check the pid instead
  }
  Block& b = state->map->block();  // zero-filled by ftruncate
  b.magic = kMagic;
  b.version = kVersion;
  b.block_bytes = sizeof(Block);
  b.pid = state->pid;
  b.start_time = proc_stat(state->pid).start_time;
  if (device) std::snprintf(b.device, sizeof b.device, "%s", device->str().c_str());
  if (device && !device->is_cpu()) {
    state->native = rt.context(*device).backend().create_ipc_event();
    if (state->native) {
      auto bytes = state->native->handle();
      std::memcpy(b.native, bytes.data(), bytes.size());
      b.native_bytes = static_cast<std::uint32_t>(bytes.size());
    }
  }

  // What the export covers: the work tied to the event now, both what has finished (an event
  // keeps every record: one may have failed already, snap.error) and what is pending. The
  // word says failed if either part did, once the pending part is over (as the event itself
  // does): a failure already there must not be lost for the pending part's success.
  auto verdict = std::make_shared<EventState>(device, EventOptions{false});
  for (Ref<Work>& w : snap.pending) verdict->record(std::move(w), device);
  std::exception_ptr earlier = snap.error;
  if (snap.pending.empty()) {
    state->publish_final(earlier);  // finished (or failed) already
  } else {
    // An export that has failed already makes no native record: the importers' streams wait
    // for the gate, which fails with the verdict, as for work that fails later.
    if (state->native && !earlier) {
      // The native event, recorded on the GPU after the work (gpu_path.hpp).
      detail::record_native_after(state, *verdict, *device);
    }
    // The word is set once, from the verdict's callback (on a runtime thread, no runtime lock
    // held), or, where the runtime's shutdown drops that callback still queued (the process
    // exits right after the work), when it is dropped, the work being over by then: importers
    // would otherwise read "the exporter died" for work that finished. Holds `verdict` until
    // then.
    struct FinalWord {
      std::shared_ptr<detail::ExportState> state;
      std::shared_ptr<EventState> verdict;
      std::exception_ptr earlier;
      std::atomic<bool> written{false};
      void write() noexcept {
        if (written.exchange(true)) return;
        std::exception_ptr error = earlier;
        if (!error) {
          try {
            error = verdict->error();
          } catch (...) {
            error = std::current_exception();  // (out of memory while it is decided)
          }
        }
        state->publish_final(error);
      }
      ~FinalWord() {
        if (verdict->poll()) write();
      }
    };
    auto final_word = std::make_shared<FinalWord>(state, verdict, earlier);
    verdict->add_callback([final_word] { final_word->write(); });
  }

  const std::string handle = handle_of(name);
  ExportedEvent out;
  {
    OwnedNames& o = owned_names();
    std::lock_guard lock(o.mu);
    if (o.pid != state->pid) {
      o.names.clear();  // a forked child's copy of the parent's list
      o.pid = state->pid;
    }
    o.names.insert(name);
  }
  out.owner_ = std::make_shared<detail::ExportOwner>(name, handle, event, state);
  unlink_on_error.name = nullptr;
  return out;
}

}  // namespace eventide::ipc
