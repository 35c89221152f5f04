// The shared block of an export (eventide/ipc.hpp): what one process writes and others read,
// in POSIX shared memory (mode 0600, named "/eventide.<pid>.<n>.<random>", the name in the
// handle), and the futexes its words are waited on with.
//
// A header written once by the exporter before the name leaves it (magic, version, pid and
// start time, device, native handle bytes), and a 32-bit state word, the futex word, whose
// bits only ever get set:
//
//     0 ──▶ kGpuReady (the native event has been recorded after the work: its handle may be
//     │     used) ──▶ kDone | kFailed (final; kFailed's text is written before the bit)
//     └───────────────────────────▶ kDone | kFailed
//
// Memory ordering: the exporter writes the error text, then sets the bit with a release
// fetch_or; the importer reads the word with acquire before the text.
//
// The users word (the GPU path, gpu_path.hpp): a count of importers that have opened (or are
// opening) the native handle, and a closing bit, one atomic word.
//
// Futexes on these words are shared ones (not FUTEX_PRIVATE): the words are in memory other
// processes map.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "core/backend.hpp"

namespace eventide::ipc::detail {

constexpr std::uint64_t kMagic = 0x3130'4350'4945'5645ull;  // "EVEIPC01", little-endian
constexpr std::uint32_t kVersion = 2;  // 2: the users word (1 had none; the handles are alike)
constexpr std::string_view kHandlePrefix = "eventide-ipc:1:";
enum : std::uint32_t { kGpuReady = 1u, kDone = 2u, kFailed = 4u };
constexpr std::uint32_t kFinal = kDone | kFailed;
constexpr std::uint32_t kClosing = 1u << 31;  // Block::users: the exporter destroys its native event
constexpr std::uint32_t kUserCount = kClosing - 1;
// How often an importer checks that the exporter still lives (liveness.hpp).
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
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Block& block() const noexcept { return *block_; }

 private:
  Block* block_;
};

// --- names and handles ---------------------------------------------------------------------

// A fresh block name, "/eventide.<pid>.<n>.<random>".
std::string new_block_name();
// The block's name ("/eventide....") from a handle; InvalidArgument if it is malformed.
std::string name_from_handle(const std::string& handle);
// The handle of the block named `name` ("/eventide..." -> "eventide-ipc:1:eventide...").
std::string handle_of(const std::string& name);

// --- what a block says -----------------------------------------------------------------------

// The importer's error for a block whose word says failed: an OpError with the exporter's text.
std::exception_ptr remote_failure(const Block& b, const std::string& handle);
// The importer's error for an export whose exporter died before its word was final.
std::exception_ptr exporter_died(pid_t pid, const std::string& handle);

std::string errno_text(int e);

// --- futexes ---------------------------------------------------------------------------------

inline void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                       const timespec* relative) noexcept {
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
inline long futex_waitv(WaitV* waiters, std::size_t n, const timespec& deadline) noexcept {
  return syscall(SYS_futex_waitv, waiters, static_cast<unsigned>(n), 0u, &deadline, CLOCK_MONOTONIC);
}

}  // namespace eventide::ipc::detail
