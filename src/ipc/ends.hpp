// The two ends of an export (eventide/ipc.hpp), as the exporting side (export.cpp), the
// importing side (import.cpp), the watcher thread (watcher.cpp) and the GPU path
// (gpu_path.cpp) share them: ExportState is the exporter's, Import an importer's.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "core/backend.hpp"
#include "core/ref.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "ipc/block.hpp"

namespace eventide::ipc::detail {

using eventide::detail::IpcNativeEvent;
using eventide::detail::Ref;
using eventide::detail::Timeline;
using eventide::detail::Work;

// The exporter's block names, removed at exit, and the descriptors of its liveness locks,
// which a forked child closes (the exports' fork stage, export.cpp). Under `mu`.
struct OwnedNames {
  std::mutex mu;
  std::set<std::string> names;
  std::set<int> lock_fds;  // the liveness locks' descriptors (ExportState::lock_fd)
  pid_t pid = 0;
};
// Made at the first export (never freed: the exit handler uses it).
OwnedNames& owned_names();

// An exporter's native event whose destroy waits for its importers (the users word).
struct Retired {
  std::shared_ptr<Mapping> map;
  std::unique_ptr<IpcNativeEvent> native;
};

// What the export's completion callback and its record op share: the mapping and the native
// event, alive until both have run and every ExportedEvent copy is gone.
struct ExportState {
  ~ExportState() {
    release_lock();
    retire_native();
  }
  // The native event goes once no importer may use it (the users word): now, or later on the
  // watcher's thread. A forked child's copy is not ours to destroy (nor is CUDA usable
  // there). (gpu_path.cpp)
  void retire_native() noexcept;
  // Lets go of the liveness lock (export.cpp).
  void release_lock() noexcept;
  // Sets `bits` in the state word and wakes its waiters (export.cpp).
  void publish(std::uint32_t bits) const noexcept;
  // Sets the final bit: done, or failed with `error`'s text written first (export.cpp).
  void publish_final(const std::exception_ptr& error) noexcept;

  std::shared_ptr<Mapping> map;
  pid_t pid = 0;  // the exporter's: a forked child neither writes nor removes anything
  std::unique_ptr<IpcNativeEvent> native;
  // The liveness lock's descriptor, held while the word is not final (-1 after).
  std::atomic<int> lock_fd{-1};
};

// What an importer may do with the exporter's native event (the users word, gpu_path.hpp).
enum class NativeUse {
  counted,   // the count is raised: open it, wait on it, then lower it (Import::drop_native)
  finished,  // the work is over (the state is final): nothing to wait for on the GPU
  gone,      // the exporter destroys it before the work was over: cannot be waited for
};

// One import, watched by the watcher thread until its word is final. The imported event holds
// two host Works on a private timeline: the gate (seq 1: the GPU handle may be used, or the
// work is over) and the verdict (seq 2: final). On the CPU the event is the verdict alone; on
// a GPU it is a marker after a GPU-side wait, with the verdict beside it (gpu_path.hpp).
struct Import {
  ~Import() {
    close_lock_fd();
    drop_native();
  }
  // Closes the opened native event, then lowers the users count: after the stream's wait on
  // it has passed on the GPU (the completion of the marker after it), or if it never waited.
  // (gpu_path.cpp)
  void drop_native() noexcept;
  // Opens the native event if the users word lets us (import_event, the stream's wait op).
  // InvalidArgument if the backend has no interprocess events. (gpu_path.cpp)
  NativeUse open_native();
  void close_lock_fd() noexcept {
    if (lock_fd >= 0) ::close(lock_fd);
    lock_fd = -1;
  }
  std::shared_ptr<Mapping> map;
  int lock_fd = -1;  // the block, open, to look at the exporter's liveness lock (watcher only)
  std::string name;    // the block's
  std::string handle;  // for messages
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  Ref<Timeline> timeline;  // the gate (1) and the verdict (2)
  Ref<Work> gate;
  Ref<Work> verdict;
  bool gate_done = false;  // watcher only (and import_event before it is watched)
  std::chrono::steady_clock::time_point next_liveness;
  // The GPU path: the native event, opened when the record has been made (import_event or the
  // stream's wait op, which also touches it; never both at once: the op runs after the gate).
  eventide::detail::DeviceBackend* backend = nullptr;
  std::unique_ptr<IpcNativeEvent> native;
  bool counted = false;  // the users count has been raised for `native` (not yet lowered)
  pid_t owner_pid = ::getpid();  // the process that imported (and may raise the count)
};

// Finishes a host Work of an import (times: now) without advancing its timeline.
void settle(Work& w, std::exception_ptr error) noexcept;

}  // namespace eventide::ipc::detail
