// Whether an exporter still lives (eventide/ipc.hpp): an importer waits for an exported event
// only while its exporter may still finish it.
//
// The exporter holds a liveness lock on its block while its word is not final: an
// open-file-description lock (F_OFD_SETLK) on the block's first byte, through a descriptor of
// its own. It goes when the process ends however it ends (a zombie holds none), is not the
// process's pid (so it means the same in another PID namespace), and a child of fork() lets go
// of its copy (the exports' fork stage). The importer looks at it through its own descriptor
// (F_OFD_GETLK). Where the kernel lacks such locks (Linux before 3.15), the exporter's pid and
// start time (/proc/<pid>/stat: a zombie or a reused pid counts as dead) stand in.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "ipc/block.hpp"

namespace eventide::ipc::detail {

// /proc/<pid>/stat's state and start time; read false if it could not be read.
struct ProcStat {
  bool read = false;
  char state = '?';
  std::uint64_t start_time = 0;
};
ProcStat proc_stat(pid_t pid) noexcept;

// Takes the liveness lock through `fd`, the exporter's own descriptor of its block: false
// where it cannot be taken (a kernel without OFD locks): importers check the pid instead.
bool take_liveness_lock(int fd) noexcept;

// Whether the exporter of `b` (the process `pid`, started at `start_time`) is gone: its
// liveness lock let go, looked at through `lock_fd` (the block, open), or, without OFD locks
// or a descriptor, its process no longer there.
bool exporter_gone(const Block& b, int lock_fd, pid_t pid, std::uint64_t start_time) noexcept;

}  // namespace eventide::ipc::detail
