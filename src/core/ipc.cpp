// Events across processes (eventide/ipc.hpp): the shared block, the exporter's side, and the
// importing process's watcher thread.
//
// The block (POSIX shared memory, mode 0600): a header written once by the exporter before
// the name leaves it (magic, version, pid and start time, device, native handle bytes), and a
// 32-bit state word, the futex word, whose bits only ever get set:
//
//     0 ──▶ kGpuReady (the native event has been recorded after the work: its handle may be
//     │     used) ──▶ kDone | kFailed (final; kFailed's text is written before the bit)
//     └───────────────────────────▶ kDone | kFailed
//
// Memory ordering: the exporter writes the error text, then sets the bit with a release
// fetch_or; the importer reads the word with acquire before the text.
//
// The users word (GPU path): CUDA leaves undefined what an imported CUDA event does once its
// exporter has destroyed it, so the exporter keeps its native event until no importer may
// touch it. The word holds a count of importers that have opened (or are opening) the handle
// and a closing bit, one atomic word, so that "count is 0" and "no one may open from now on"
// are one step (a CAS 0 -> kClosing by the exporter):
// * an importer opens the handle only after raising the count with a CAS that sees no closing
//   bit, and only while the state is not final (a final word: the work is over, nothing to
//   wait for on the GPU; the imported event then finishes on the host verdict alone); it
//   lowers the count (and wakes the word) once its stream's wait has passed on the GPU and it
//   has closed its own handle;
// * the exporter, once the user has let go of the export and its callbacks have run,
//   destroys the native event only after that CAS succeeds; otherwise it defers the destroy
//   (the watcher thread retries when the word changes, and every ~100 ms). An importer that
//   died holding a count is never waited for: that one event is leaked.
// * an importer that finds the closing bit while the state is not final (the exporter's
//   runtime shut down before the work finished) fails its stream's wait, since the work
//   cannot be waited for on the GPU any more.
//
// The imported event holds two host Works on a private timeline: the gate (seq 1: the GPU
// handle may be used, or the work is over) and the verdict (seq 2: final). On the CPU the
// event is the verdict alone. On a GPU it is a marker on an internal stream placed after a
// native wait for the exporter's CUDA event (the stream waits for the gate first: at once
// when it is already set), plus the verdict as a host verdict (EventState::record_host_
// verdict): host waits report the exporter's failure, streams do not wait for the host.
//
// The watcher (one thread per process, started at the first import) waits on every watched
// state word at once (futex_waitv; where the kernel lacks it, it polls, backing off to 2 ms),
// finishes the gates and verdicts, and every ~100 ms checks that the exporters still live:
// by the exporter's liveness lock on its block (lock_held: the kernel lets go of it when the
// process ends, whatever the PID namespace), else, where the kernel lacks such locks, by its
// pid (/proc/<pid>/stat: a zombie or a reused pid counts as dead). It holds no runtime lock;
// the Works it finishes fire their listeners inline, as UserEvent::set does.
#include "eventide/ipc.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "core/work.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"

namespace eventide::ipc {

namespace {
// A GPU-side wait for a native event launches none of the backend's kernels.
eventide::detail::LaunchOptions no_backend_kernels() {
  eventide::detail::LaunchOptions options;
  options.no_backend_kernels = true;
  return options;
}
}  // namespace

namespace {

using eventide::detail::EventState;
using eventide::detail::IpcNativeEvent;
using eventide::detail::Ref;
using eventide::detail::Runtime;
using eventide::detail::StreamState;
using eventide::detail::Timeline;
using eventide::detail::Work;
using eventide::detail::WorkKind;

// An imported event's kind on the GPU path (core/event_kind.hpp): the exporter's verdict is
// host work that host waits, poll and callbacks wait for, and that a stream's wait leaves out
// while it is pending, since streams order after the GPU-side marker recorded beside it (no
// host round trip). Once the verdict has finished, its error counts for streams too.
class HostVerdict final : public eventide::detail::EventKind {
 public:
  explicit HostVerdict(Ref<Work> verdict) noexcept : verdict_(std::move(verdict)) {}
  bool hidden_from_streams(const Work& work) const noexcept override {
    return &work == verdict_.get();
  }
  void cleared() noexcept override { verdict_ = nullptr; }  // reset: a plain event from now on

 private:
  Ref<Work> verdict_;
};

constexpr std::uint64_t kMagic = 0x3130'4350'4945'5645ull;  // "EVEIPC01", little-endian
constexpr std::uint32_t kVersion = 2;  // 2: the users word (1 had none; the handles are alike)
constexpr std::string_view kHandlePrefix = "eventide-ipc:1:";
enum : std::uint32_t { kGpuReady = 1u, kDone = 2u, kFailed = 4u };
constexpr std::uint32_t kFinal = kDone | kFailed;
constexpr std::uint32_t kClosing = 1u << 31;  // Block::users: the exporter destroys its native event
constexpr std::uint32_t kUserCount = kClosing - 1;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

struct Block {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t block_bytes;
  std::atomic<std::uint32_t> state;
  std::int32_t pid;
  std::uint64_t start_time;  // the exporter's, from /proc (0: unknown)
  char device[32];           // the exporter's event's device ("cuda:0"; "" for host work)
  std::uint32_t native_bytes;
  std::uint32_t error_bytes;
  std::uint32_t liveness_lock;  // 1: the exporter holds the liveness lock (else: check the pid)
  std::atomic<std::uint32_t> users;  // importers using the native event, and kClosing
  unsigned char native[eventide::detail::kIpcNativeHandleBytes];
  char error[4096];
};
static_assert(offsetof(Block, users) == 76, "ipc_test reads the users word at this offset");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// A mapping of a block, unmapped with the last reference.
class Mapping {
 public:
  explicit Mapping(void* address) noexcept : block_(static_cast<Block*>(address)) {}
  ~Mapping() { munmap(block_, sizeof(Block)); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Block& block() const noexcept { return *block_; }

 private:
  Block* block_;
};

std::string errno_text(int e) { return std::string(std::strerror(e)); }

// --- futexes (shared, not FUTEX_PRIVATE: the word is in memory other processes map) -------

void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen, const timespec* relative) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, seen, relative, nullptr, 0);
}

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449  // the same number on every architecture since Linux 5.16
#endif
struct WaitV {  // struct futex_waitv
  std::uint64_t val;
  std::uint64_t uaddr;
  std::uint32_t flags;
  std::uint32_t reserved;
};
constexpr std::size_t kMaxWaitV = 128;

// -1 with errno ENOSYS where the kernel lacks futex_waitv; otherwise returns when a word
// differs from its value, one is woken, or at `deadline` (CLOCK_MONOTONIC).
long futex_waitv(WaitV* waiters, std::size_t n, const timespec& deadline) noexcept {
  return syscall(SYS_futex_waitv, waiters, static_cast<unsigned>(n), 0u, &deadline, CLOCK_MONOTONIC);
}

// --- processes ----------------------------------------------------------------------------

struct ProcStat {
  bool read = false;
  char state = '?';
  std::uint64_t start_time = 0;
};

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

// The exporter's liveness lock: an open-file-description lock (F_OFD_SETLK) on the block's
// first byte, held through the exporter's own descriptor while its word is not final. It goes
// when the process ends however it ends (a zombie holds none), is not the process's pid (so
// it means the same in another PID namespace), and a child of fork() lets go of its copy
// (after_fork_in_child below). Whether someone holds it: nullopt where the kernel lacks OFD
// locks (Linux before 3.15).
std::optional<bool> lock_held(int fd) noexcept {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return std::nullopt;
  return fl.l_type != F_UNLCK;
}

bool take_lock(int fd) noexcept {
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

bool process_alive(pid_t pid, std::uint64_t start_time) noexcept {
  ProcStat st = proc_stat(pid);
  if (st.read) {
    if (st.state == 'Z' || st.state == 'X') return false;  // exited, not reaped yet
    return start_time == 0 || st.start_time == start_time;  // else: the pid was reused
  }
  return !(::kill(pid, 0) == -1 && errno == ESRCH);
}

// Whether the exporter of `b` (the process `pid`, started at `start_time`) is gone: its
// liveness lock let go, looked at through `lock_fd` (the block, open), or, without OFD locks
// or a descriptor, its process no longer there.
bool exporter_gone(const Block& b, int lock_fd, pid_t pid, std::uint64_t start_time) noexcept {
  const std::optional<bool> held = lock_fd >= 0 && b.liveness_lock == 1 ? lock_held(lock_fd) : std::nullopt;
  return held ? !*held : !process_alive(pid, start_time);
}

// --- the exporter's names, removed at exit -------------------------------------------------

struct OwnedNames {
  std::mutex mu;
  std::set<std::string> names;
  std::set<int> lock_fds;  // the liveness locks' descriptors (ExportState::lock_fd)
  pid_t pid = 0;
};

void register_ipc_fork_handlers() noexcept;

OwnedNames& owned_names() {
  static OwnedNames* names = [] {
    auto* n = new OwnedNames;  // never freed: used by the exit handler
    register_ipc_fork_handlers();
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

std::string new_block_name() {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof buf, "/eventide.%d.%llu.%08x", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(++counter), static_cast<unsigned>(rd()));
  return buf;
}

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// The block's name ("/eventide....") from a handle; InvalidArgument if it is malformed.
std::string name_from_handle(const std::string& handle) {
  auto bad = [&](const std::string& why) -> std::string {
    std::string shown = handle.size() > 80 ? handle.substr(0, 80) + "..." : handle;
    throw InvalidArgument("import_event: '" + shown + "' is not an eventide event handle (" + why +
                          "); handles look like 'eventide-ipc:1:eventide.4242.1.9f3a0c1d' and come "
                          "from ExportedEvent::handle()");
  };
  if (handle.rfind("eventide-ipc:", 0) != 0) return bad("it does not start with 'eventide-ipc:'");
  if (handle.rfind(kHandlePrefix, 0) != 0) {
    return bad("it is of another version of eventide's handles; this one reads version 1");
  }
  std::string rest = handle.substr(kHandlePrefix.size());
  if (rest.empty() || rest.size() > 200) return bad("its name is empty or too long");
  if (!std::all_of(rest.begin(), rest.end(), valid_name_char)) {
    return bad("its name has characters other than letters, digits, '.', '_' and '-'");
  }
  if (rest.rfind("eventide.", 0) != 0) return bad("its name does not start with 'eventide.'");
  return "/" + rest;
}

std::exception_ptr remote_failure(const Block& b, const std::string& handle) {
  std::uint32_t n = std::min<std::uint32_t>(b.error_bytes, sizeof b.error);
  std::string text(b.error, n);
  return std::make_exception_ptr(OpError("an event imported from process " + std::to_string(b.pid) +
                                             " failed there: " + text,
                                         "import of " + handle));
}

std::exception_ptr exporter_died(pid_t pid, const std::string& handle) {
  return std::make_exception_ptr(
      OpError("process " + std::to_string(pid) + ", which exported this event (" + handle +
                  "), exited or was killed before the event finished: nothing can finish it now",
              "import of " + handle));
}

// Finishes a host Work of an import (times: now) without advancing its timeline.
void settle(Work& w, std::exception_ptr error) noexcept {
  const std::int64_t now = eventide::detail::host_now_ns();
  w.set_times(now, now);
  w.set_error(std::move(error));
}

// --- the importing side --------------------------------------------------------------------

// What an importer may do with the exporter's native event (the users word, above).
enum class NativeUse {
  counted,   // the count is raised: open it, wait on it, then release_native_use
  finished,  // the work is over (the state is final): nothing to wait for on the GPU
  gone,      // the exporter destroys it before the work was over: cannot be waited for
};

NativeUse acquire_native_use(Block& b) noexcept {
  std::uint32_t u = b.users.load(std::memory_order_acquire);
  for (;;) {
    if (b.state.load(std::memory_order_acquire) & kFinal) return NativeUse::finished;
    if (u & kClosing) {
      return (b.state.load(std::memory_order_acquire) & kFinal) ? NativeUse::finished : NativeUse::gone;
    }
    if ((u & kUserCount) == kUserCount) return NativeUse::gone;  // 2^31 importers: not reached
    if (b.users.compare_exchange_weak(u, u + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
  }
  // Final meanwhile: no need to open it after all.
  if (b.state.load(std::memory_order_acquire) & kFinal) {
    b.users.fetch_sub(1, std::memory_order_release);
    futex_wake_all(&b.users);
    return NativeUse::finished;
  }
  return NativeUse::counted;
}

struct Import {
  ~Import() {
    close_lock_fd();
    drop_native();
  }
  // Closes the opened native event, then lowers the users count: after the stream's wait on
  // it has passed on the GPU (the completion of the marker after it), or if it never waited.
  void drop_native() noexcept {
    if (::getpid() != owner_pid) {
      // A forked child's copy: the count is the parent's to lower, and CUDA is not usable here.
      (void)native.release();
      counted = false;
      return;
    }
    native.reset();
    if (counted) {
      counted = false;
      Block& b = map->block();
      b.users.fetch_sub(1, std::memory_order_release);
      futex_wake_all(&b.users);  // an exporter's watcher may be waiting to destroy it
    }
  }
  // Opens the native event if the users word lets us (import_event, the stream's wait op).
  // InvalidArgument if the backend has no interprocess events.
  NativeUse open_native() {
    Block& b = map->block();
    NativeUse use = acquire_native_use(b);
    if (use != NativeUse::counted) return use;
    counted = true;
    try {
      native = backend->open_ipc_event(
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(b.native), b.native_bytes));
    } catch (...) {
      drop_native();
      throw;
    }
    if (!native) {
      drop_native();
      throw InvalidArgument("import_event: this device cannot open native interprocess events");
    }
    return use;
  }
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

// An exporter's native event whose destroy waits for its importers (the users word).
struct Retired {
  std::shared_ptr<Mapping> map;
  std::unique_ptr<IpcNativeEvent> native;
};

// Destroys `r`'s native event if no importer uses it (and none may from now on): true if done.
bool try_destroy(Retired& r) noexcept {
  std::uint32_t expected = 0;
  Block& b = r.map->block();
  if (!b.users.compare_exchange_strong(expected, kClosing, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    return false;  // importers use it
  }
  r.native.reset();
  return true;
}

class Watcher;
std::atomic<Watcher*> g_watcher{nullptr};

class Watcher {
 public:
  static Watcher& get() {
    static Watcher* w = [] {
      auto* made = new Watcher;  // never freed: its thread runs until the process ends
      register_ipc_fork_handlers();
      g_watcher.store(made, std::memory_order_release);
      return made;
    }();
    return *w;
  }

  // Settles the import now if the exported work is over (or its exporter gone): true then,
  // and the import needs no watching.
  static bool settle_now_if_over(Import& imp) noexcept { return visit(imp, std::chrono::steady_clock::now()); }

  // fork()'s child step (register_ipc_fork_handlers), if a watcher was made.
  static void after_fork_in_child_if_made() noexcept {
    if (Watcher* w = g_watcher.load(std::memory_order_acquire)) w->after_fork_in_child();
  }

  // Takes `r` to destroy once its importers have let go (try_destroy), retried when its users
  // word changes and at every liveness check.
  void defer(Retired r) {
    std::lock_guard lock(mu_);
    retired_.push_back(std::move(r));
    if (!started_) {
      std::thread(&Watcher::loop, this).detach();
      started_ = true;
    }
    wake_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&wake_);
  }

  void add(std::shared_ptr<Import> imp) {
    std::lock_guard lock(mu_);
    entries_.push_back(std::move(imp));
    if (!started_) {
      std::thread(&Watcher::loop, this).detach();
      started_ = true;
    }
    wake_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&wake_);
  }

 private:
  void after_fork_in_child() noexcept {
    // The thread is the parent's; the lock may have been held by it.
    new (&mu_) std::mutex;
    started_ = false;
    // The parent's deferred destroys: its events, its word to close; the copies are leaked.
    for (Retired& r : retired_) (void)r.native.release();
    retired_.clear();
    if (!entries_.empty()) {
      try {
        std::thread(&Watcher::loop, this).detach();
        started_ = true;
      } catch (...) {
        // No thread: the next import starts one.
      }
    }
  }

  // Looks at one import: finishes what its word says; true once it is final.
  static bool visit(Import& imp, std::chrono::steady_clock::time_point now) noexcept {
    Block& b = imp.map->block();
    const std::uint32_t s = b.state.load(std::memory_order_acquire);
    std::exception_ptr error;
    bool final = false;
    if (s & kFinal) {
      final = true;
      if (s & kFailed) {
        try {
          error = remote_failure(b, imp.handle);
        } catch (...) {
          error = std::current_exception();
        }
      }
    } else if (now >= imp.next_liveness) {
      imp.next_liveness = now + kLivenessPeriod;
      if (exporter_gone(b, imp.lock_fd, imp.pid, imp.start_time)) {
        // Look again: it may have set the word just before it exited.
        if (b.state.load(std::memory_order_acquire) & kFinal) return visit(imp, now);
        final = true;
        try {
          error = exporter_died(imp.pid, imp.handle);
        } catch (...) {
          error = std::current_exception();
        }
        ::shm_unlink(imp.name.c_str());  // it could not remove its name itself
      }
    }
    if (final) {
      imp.close_lock_fd();
      if (!imp.gate_done) settle(*imp.gate, error);
      imp.gate_done = true;
      settle(*imp.verdict, std::move(error));
      imp.timeline->advance(2);  // fires the listeners inline: we hold no lock
      return true;
    }
    if ((s & kGpuReady) && !imp.gate_done) {
      imp.gate_done = true;
      settle(*imp.gate, nullptr);
      imp.timeline->advance(1);
    }
    return false;
  }

  void loop() noexcept {
    std::vector<std::shared_ptr<Import>> local;
    std::vector<WaitV> waiters;
    auto backoff = std::chrono::microseconds(20);
    bool have_waitv = true;
    for (;;) {
      const std::uint32_t seen = wake_.load(std::memory_order_acquire);
      try {
        std::lock_guard lock(mu_);
        local = entries_;
      } catch (...) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // out of memory: later
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      std::vector<Import*> done;
      auto next_check = now + kLivenessPeriod;
      waiters.clear();
      waiters.push_back(WaitV{seen, reinterpret_cast<std::uint64_t>(&wake_), FUTEX_32, 0});
      retry_retired(waiters);
      for (auto& imp : local) {
        const std::uint32_t s = imp->map->block().state.load(std::memory_order_acquire);
        // Finished, or dropped: where the import holds the only references to its gate and
        // verdict, no event, wait or callback can see them any more, and watching on would
        // keep its descriptor and mapping until the exported work ends (1,018 dropped imports
        // used up the process's descriptors).
        if (visit(*imp, now) || (imp->gate.unique() && imp->verdict.unique())) {
          done.push_back(imp.get());
          continue;
        }
        next_check = std::min(next_check, imp->next_liveness);
        if (waiters.size() < kMaxWaitV) {
          waiters.push_back(WaitV{s, reinterpret_cast<std::uint64_t>(&imp->map->block().state),
                                  FUTEX_32, 0});
        }
      }
      if (!done.empty()) {
        std::lock_guard lock(mu_);
        std::erase_if(entries_, [&](const std::shared_ptr<Import>& e) {
          return std::find(done.begin(), done.end(), e.get()) != done.end();
        });
      }
      local.clear();  // the imports' Works and mappings go with the events now
      if (!done.empty()) continue;  // look again before sleeping
      if (waiters.size() == 1) {
        futex_wait(&wake_, seen, nullptr);  // nothing watched: until the next import
        continue;
      }
      if (have_waitv) {
        timespec deadline;
        ::clock_gettime(CLOCK_MONOTONIC, &deadline);
        const auto wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::max(next_check - std::chrono::steady_clock::now(),
                                          std::chrono::steady_clock::duration(0)))
                                 .count() +
                             1'000'000;  // a millisecond past: the check is then due
        deadline.tv_sec += static_cast<time_t>((deadline.tv_nsec + wait_ns) / 1'000'000'000);
        deadline.tv_nsec = static_cast<long>((deadline.tv_nsec + wait_ns) % 1'000'000'000);
        // More imports than futex_waitv takes: the rest are looked at every 2 ms.
        if (waiters.size() == kMaxWaitV) {
          ::clock_gettime(CLOCK_MONOTONIC, &deadline);
          deadline.tv_nsec += 2'000'000;
          if (deadline.tv_nsec >= 1'000'000'000) {
            deadline.tv_nsec -= 1'000'000'000;
            ++deadline.tv_sec;
          }
        }
        if (futex_waitv(waiters.data(), waiters.size(), deadline) == -1 && errno == ENOSYS) {
          have_waitv = false;
        }
        continue;
      }
      // No futex_waitv (Linux before 5.16): poll, backing off to 2 ms.
      std::this_thread::sleep_for(backoff);
      backoff = std::min<std::chrono::microseconds>(backoff * 2, std::chrono::milliseconds(2));
      if (wake_.load(std::memory_order_acquire) != seen) backoff = std::chrono::microseconds(20);
    }
  }

  // Retries the deferred destroys; adds a waiter on the users word of each left.
  void retry_retired(std::vector<WaitV>& waiters) noexcept {
    std::vector<Retired> destroy;
    {
      std::lock_guard lock(mu_);
      if (retired_.empty()) return;
      // Not after the runtime has shut down (static destruction: the CUDA runtime may be gone;
      // the process's end frees the events).
      bool running = true;
      try {
        Runtime::get().check_running();
      } catch (...) {
        running = false;
      }
      for (std::size_t i = 0; i < retired_.size();) {
        Block& b = retired_[i].map->block();
        std::uint32_t u = b.users.load(std::memory_order_acquire);
        if (running && u == 0) {
          // The CAS is try_destroy's; the destroy itself is done outside the lock.
          if (b.users.compare_exchange_strong(u, kClosing, std::memory_order_acq_rel)) {
            destroy.push_back(std::move(retired_[i]));
            retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
          }
        }
        if (waiters.size() < kMaxWaitV) {
          waiters.push_back(WaitV{u, reinterpret_cast<std::uint64_t>(&b.users), FUTEX_32, 0});
        }
        ++i;
      }
    }
    destroy.clear();  // cudaEventDestroy
  }

  std::mutex mu_;
  std::vector<Retired> retired_;  // deferred destroys of this process's exported native events
  std::vector<std::shared_ptr<Import>> entries_;
  std::atomic<std::uint32_t> wake_{0};
  bool started_ = false;
};

// fork(). Registered once, by the first export or import, when the runtime has registered its
// own handlers already (both call Runtime::get() first):
// * before the fork, the exporters' lock (OwnedNames::mu) is taken, so that the child finds it
//   free; after it, the child closes its copies of the liveness locks' descriptors, so that
//   the locks go when the exporter goes, not when its last child does;
// * the runtime's handlers are registered again after that pair: prepare handlers run last
//   registered first, so the runtime quiesces (a running CPU body or a callback may need
//   `mu`: export_event, dropping an ExportedEvent) before `mu` is taken, instead of such a
//   body blocking on it for the whole grace period and failing in the child as interrupted by
//   fork; its parent and child steps then run after `mu` is let go (they act once per fork
//   however often registered: the outermost call acts);
// * the watcher's child step (a new thread for the imports) is registered after that again,
//   to run once the runtime's child is in order.
void register_ipc_fork_handlers() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { owned_names().mu.lock(); }, [] { owned_names().mu.unlock(); },
                     [] {
                       OwnedNames& o = owned_names();
                       for (int fd : o.lock_fds) ::close(fd);
                       o.lock_fds.clear();
                       o.mu.unlock();
                     });
    eventide::detail::register_fork_handlers();
    ::pthread_atfork(nullptr, nullptr, [] { Watcher::after_fork_in_child_if_made(); });
  });
}

}  // namespace

// --- the exporting side --------------------------------------------------------------------

namespace detail {

// What the export's completion callback and its record op share: the mapping and the native
// event, alive until both have run and every ExportedEvent copy is gone.
struct ExportState {
  ~ExportState() {
    release_lock();
    retire_native();
  }
  // The native event goes once no importer may use it (the users word): now, or later on the
  // watcher's thread. A forked child's copy is not ours to destroy (nor is CUDA usable there).
  void retire_native() noexcept {
    if (!native) return;
    if (::getpid() != pid) {
      (void)native.release();
      return;
    }
    Retired r{map, std::move(native)};
    if (try_destroy(r)) return;
    try {
      Watcher::get().defer(std::move(r));
    } catch (...) {
      (void)r.native.release();  // no memory or thread for it: leaked rather than freed early
    }
  }
  std::shared_ptr<Mapping> map;
  pid_t pid = 0;  // the exporter's: a forked child neither writes nor removes anything
  std::unique_ptr<IpcNativeEvent> native;
  // The liveness lock's descriptor, held while the word is not final (-1 after).
  std::atomic<int> lock_fd{-1};

  void release_lock() noexcept {
    int fd = lock_fd.exchange(-1);
    if (fd < 0) return;
    OwnedNames& o = owned_names();
    std::lock_guard lock(o.mu);
    // In a forked child the handler has closed it already (and the number may be another's).
    if (o.lock_fds.erase(fd) > 0 && ::getpid() == pid) ::close(fd);
  }

  void publish(std::uint32_t bits) const noexcept {
    if (::getpid() != pid) return;
    Block& b = map->block();
    b.state.fetch_or(bits, std::memory_order_release);
    futex_wake_all(&b.state);
  }
  void publish_final(const std::exception_ptr& error) noexcept {
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
};

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
  if (fd >= 0 && take_lock(fd)) {
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
      // The native event, recorded on the GPU after the work (a stream of ours waits for it);
      // its handle is usable only from then on (kGpuReady), since a never-recorded event reads
      // complete. If the work fails first, the record never runs and the verdict says failed.
      Stream s(*device);
      s.state()->wait(*verdict);
      std::shared_ptr<detail::ExportState> shared = state;
      s.enqueue("ipc export record", [s, shared] {
        shared->native->record_on(s.native_handle());
        shared->publish(kGpuReady);
      });
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

  const std::string handle = std::string(kHandlePrefix) + name.substr(1);
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

// --- import --------------------------------------------------------------------------------

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
  eventide::detail::DeviceContext& ctx = rt.context(target);  // InvalidArgument if unavailable

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

  // On the GPU path streams order after a marker recorded beside the verdict, which they
  // leave out (HostVerdict); on the host path the verdict is a plain record.
  Event out = gpu ? Event::of_state(std::make_shared<EventState>(
                        target, EventOptions{false}, std::make_unique<HostVerdict>(imp->verdict)))
                  : Event(target, EventOptions{false});
  if (gpu) {
    imp->backend = &ctx.backend();
    const std::uint32_t s = b.state.load(std::memory_order_acquire);
    // Opened only while the work is not over and the exporter keeps its event for us (the
    // users word); otherwise the wait op below decides.
    if (s & kGpuReady) (void)imp->open_native();
    if (s & (kGpuReady | kDone)) {
      settle(*imp->gate, nullptr);
      imp->gate_done = true;
      imp->timeline->advance(1);
    }
    // The internal stream: waits for the gate (nothing to wait for when it is set), then on the
    // GPU for the exporter's native event, then the marker the event is tied to.
    std::shared_ptr<StreamState> stream = rt.create_stream(target);
    EventState gate(std::nullopt, EventOptions{false});
    gate.record(imp->gate, std::nullopt);
    stream->wait(gate);
    void* native_stream = stream->native_handle();
    std::shared_ptr<Import> held = imp;
    stream->launch("ipc wait", {}, {}, eventide::detail::Callback([held, native_stream] {
                     const Block& blk = held->map->block();
                     if (!held->native &&
                         (blk.state.load(std::memory_order_acquire) & kGpuReady) &&
                         held->open_native() == NativeUse::gone) {
                       throw OpError("process " + std::to_string(held->pid) +
                                         " let go of the GPU event it exported before its work "
                                         "was over (its runtime shut down): it cannot be waited "
                                         "for on the GPU",
                                     "import of " + held->handle);
                     }
                     // Without a record, or once the word is final, the exported work is over:
                     // nothing to wait for on the GPU.
                     if (held->native) held->native->wait_on(native_stream);
                   }),
                   no_backend_kernels());
    Ref<Work> marker = stream->mark(StreamState::MarkerTiming::untimed);
    // Once the stream has passed the wait on the GPU (or failed), the native event is closed
    // and the exporter told it may destroy its own (the users word).
    auto passed = std::make_shared<EventState>(target, EventOptions{false});
    passed->record(marker, target);
    // Runs once; holds `passed` until then.
    passed->add_callback([held, passed] { held->drop_native(); });
    out.state()->record(imp->verdict, std::nullopt);
    out.state()->record(std::move(marker), target);
  } else {
    // The host path: the verdict alone (the gate is not used).
    settle(*imp->gate, nullptr);
    imp->gate_done = true;
    imp->timeline->advance(1);
    out.state()->record(imp->verdict, std::nullopt);
    // An export that is over already reads so at once (poll() right after the import was
    // False in 162 of 200 imports: it waited for the watcher's turn).
    if (Watcher::settle_now_if_over(*imp)) return out;
  }
  Watcher::get().add(std::move(imp));
  return out;
}

}  // namespace eventide::ipc
