// Whether an exporter still lives (liveness.hpp).
#include "ipc/liveness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace eventide::ipc::detail {

ProcStat proc_stat(pid_t pid) noexcept {
  ProcStat out;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return out;
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces and ')' : the fields start after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return out;
  p += 2;
  out.state = *p;
  // Field 3 is the state; the start time is field 22.
  int field = 3;
  while (*p && field < 22) {
    if (*p++ == ' ') ++field;
  }
  out.start_time = std::strtoull(p, nullptr, 10);
  out.read = true;
  return out;
}

namespace {

// Whether someone holds the liveness lock of the block open as `fd`: nullopt where the kernel
// lacks OFD locks.
std::optional<bool> lock_held(int fd) noexcept {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return std::nullopt;
  return fl.l_type != F_UNLCK;
}

bool process_alive(pid_t pid, std::uint64_t start_time) noexcept {
  ProcStat st = proc_stat(pid);
  if (st.read) {
    if (st.state == 'Z' || st.state == 'X') return false;  // exited, not reaped yet
    return start_time == 0 || st.start_time == start_time;  // else: the pid was reused
  }
  return !(::kill(pid, 0) == -1 && errno == ESRCH);
}

}  // namespace

bool take_liveness_lock(int fd) noexcept {
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

bool exporter_gone(const Block& b, int lock_fd, pid_t pid, std::uint64_t start_time) noexcept {
  const std::optional<bool> held = lock_fd >= 0 && b.liveness_lock == 1 ? lock_held(lock_fd) : std::nullopt;
  return held ? !*held : !process_alive(pid, start_time);
}

}  // namespace eventide::ipc::detail
