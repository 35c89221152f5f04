// Parker: the one blocking primitive of the runtime. A thread parks; anyone unparks it.
//
// State machine: EMPTY --unpark--> NOTIFIED --park returns--> EMPTY, and a parking thread goes
// EMPTY --> PARKED (sleeping on a futex) until unpark turns it NOTIFIED. One notification is a
// token: unparks before a park make that park return at once; several merge into one. park()
// may also return spuriously (timeout), so callers loop over their own condition:
//
//   while (!condition()) parker.park(deadline);
//
// Short waits are fast and long ones cost no CPU: park() spins (4 µs on the pause instruction,
// then yielding the CPU) for up to 20 µs before it sleeps on a futex (anchors: a sleeping
// thread takes ~15 µs to wake on this machine, a spinning one 0.2 µs).
// Thread-safety: one thread parks, any number unpark. Memory ordering: what a thread did
// before unpark() is visible to the parked thread once park() returns because of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <optional>

#include "core/ref.hpp"

namespace eventide::detail {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;

inline Deadline deadline_after(std::optional<std::chrono::nanoseconds> timeout) {
  if (!timeout) return std::nullopt;
  auto now = Clock::now();
  // Saturate: a huge timeout means "forever", not an overflowed time point in the past.
  if (*timeout > Clock::time_point::max() - now) return std::nullopt;
  return now + *timeout;
}

inline bool expired(const Deadline& deadline) {
  return deadline && Clock::now() >= *deadline;
}

class Parker final : public RefCounted {
 public:
  // Returns after an unpark (consuming it), at the deadline, or spuriously. With Sleep::never
  // and a deadline, it never sleeps: it spins (yielding) until notified or the deadline.
  enum class Sleep { allowed, never };
  void park(const Deadline& deadline = std::nullopt, Sleep sleep = Sleep::allowed) noexcept;
  // Like park(), without the spin: sleeps at once until notified or `until`.
  void nap(Clock::time_point until) noexcept;
  void unpark() noexcept;

 private:
  static constexpr std::uint32_t kEmpty = 0;
  static constexpr std::uint32_t kNotified = 1;
  static constexpr std::uint32_t kParked = 2;
  std::atomic<std::uint32_t> state_{kEmpty};
};

// Spins until `ready()` (true) or the spin duration or deadline is over (false): on the pause
// instruction for the first microseconds, then yielding the CPU, so that a thread that
// would finish the work on this same core gets to run. `ready` is called every few spins.
// With SpinLength::whole_deadline, spins until the deadline, however long.
enum class SpinLength { brief, whole_deadline };
template <class Ready>
bool spin_until(Ready&& ready, const Deadline& deadline, SpinLength length = SpinLength::brief);

// How a waiter sleeps once its spin is over. By default it sleeps until woken. When what it
// waits for is work whose progress it can read itself (a GPU writes its counters into host
// memory), it naps instead: short, precise sleeps (kNap, with the thread's timer slack made
// 1 µs meanwhile) after each of which it looks again. So the end of GPU work is seen within
// a nap by the waiter itself, not after the watcher notices it and then wakes a thread that
// had gone into a deep sleep (on the H200 machine that chain cost about 80 µs, 200+ µs p99).
// The naps cost a few percent of a core while the wait lasts.
class WaitPacer {
 public:
  static constexpr std::chrono::microseconds kNap{25};
  explicit WaitPacer(bool nap) noexcept;
  ~WaitPacer();
  WaitPacer(const WaitPacer&) = delete;
  WaitPacer& operator=(const WaitPacer&) = delete;
  // Sleeps on `parker` until notified, `deadline`, or (napping) the end of the nap.
  void park(Parker& parker, const Deadline& deadline) noexcept;

 private:
  bool nap_;
  int saved_slack_ns_ = -1;  // the thread's timer slack before (-1: unchanged)
};

// The calling thread's parker, kept alive by references that listeners hold, so a listener
// that fires after its waiter gave up only makes one spurious wake-up.
const Ref<Parker>& this_thread_parker();

// A bounded thread pool (the CPU backend's) runs op bodies that may themselves block in a
// runtime wait (a body that waits for an event, a tensor or a stream). Its threads install an
// observer; each runtime wait that is about to sleep opens a BlockingRegion, which tells the
// observer, so that the pool can start another thread meanwhile: otherwise a pool whose every
// thread waits for work that needs a thread would never finish it. Threads without an
// observer (the user's) pay one thread-local load.
class BlockingObserver {
 public:
  virtual void blocking_begins() noexcept = 0;
  virtual void blocking_ends() noexcept = 0;

 protected:
  ~BlockingObserver() = default;
};
// Sets the calling thread's observer (null: none).
void set_blocking_observer(BlockingObserver* observer) noexcept;

class BlockingRegion {
 public:
  BlockingRegion() noexcept;
  ~BlockingRegion();
  BlockingRegion(const BlockingRegion&) = delete;
  BlockingRegion& operator=(const BlockingRegion&) = delete;

 private:
  BlockingObserver* observer_;
};

// How long park() spins before it sleeps. EVENTIDE_SPIN_US overrides it (0: never spin).
std::chrono::nanoseconds spin_duration() noexcept;

// Sleep primitives over a 32-bit word (Linux futex): wait while *word == expected.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                const Deadline& deadline) noexcept;
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;
void futex_wake_one(std::atomic<std::uint32_t>& word) noexcept;

// A pause instruction for spin loops.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline constexpr std::chrono::nanoseconds kPauseSpin = std::chrono::microseconds(4);
void yield_cpu() noexcept;

template <class Ready>
bool spin_until(Ready&& ready, const Deadline& deadline, SpinLength length) {
  const bool whole_deadline = length == SpinLength::whole_deadline;
  const auto spin = spin_duration();
  if (spin.count() <= 0 && !whole_deadline) return ready();
  const auto start = Clock::now();
  auto spin_end = start + spin;
  if (deadline && (*deadline < spin_end || whole_deadline)) spin_end = *deadline;
  const auto pause_end = start + std::min<std::chrono::nanoseconds>(spin, kPauseSpin);
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if ((i & 15) == 0) {
      const auto now = Clock::now();
      if (now >= spin_end) return false;
      if (now >= pause_end) {
        yield_cpu();
        continue;
      }
    }
    cpu_relax();
  }
}

}  // namespace eventide::detail
