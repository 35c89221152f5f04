#include "core/parker.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>

#include <sched.h>

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace eventide::detail {

namespace {

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value,
           const timespec* timeout) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr,
                 FUTEX_BITSET_MATCH_ANY);
}

std::chrono::nanoseconds read_spin_duration() noexcept {
  if (const char* env = std::getenv("EVENTIDE_SPIN_US")) {
    char* end = nullptr;
    long us = std::strtol(env, &end, 10);
    if (end != env && us >= 0) return std::chrono::microseconds(us);
  }
  return std::chrono::microseconds(20);
}

}  // namespace

std::chrono::nanoseconds spin_duration() noexcept {
  static const std::chrono::nanoseconds d = read_spin_duration();
  return d;
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                const Deadline& deadline) noexcept {
  if (!deadline) {
    futex(word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, nullptr);
    return;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time: steady_clock's clock on Linux.
  auto since_epoch = deadline->time_since_epoch();
  if (since_epoch.count() < 0) return;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(secs.count());
  ts.tv_nsec = static_cast<long>(std::chrono::nanoseconds(since_epoch - secs).count());
  futex(word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, &ts);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  futex(word, FUTEX_WAKE_BITSET | FUTEX_PRIVATE_FLAG, INT32_MAX, nullptr);
}

void futex_wake_one(std::atomic<std::uint32_t>& word) noexcept {
  futex(word, FUTEX_WAKE_BITSET | FUTEX_PRIVATE_FLAG, 1, nullptr);
}

void yield_cpu() noexcept { sched_yield(); }

void Parker::park(const Deadline& deadline, Sleep sleep) noexcept {
  const bool spin_to_deadline = sleep == Sleep::never && deadline;
  // Spin first: a notification that comes within the spin costs no sleep and no wake-up.
  if (spin_until([this] { return state_.load(std::memory_order_relaxed) == kNotified; }, deadline,
                 spin_to_deadline ? SpinLength::whole_deadline : SpinLength::brief)) {
    state_.exchange(kEmpty, std::memory_order_acquire);
    return;
  }
  if (spin_to_deadline) return;
  std::uint32_t expected = kEmpty;
  if (!state_.compare_exchange_strong(expected, kParked, std::memory_order_acquire)) {
    // A notification arrived after the spin.
    state_.exchange(kEmpty, std::memory_order_acquire);
    return;
  }
  futex_wait(state_, kParked, deadline);
  // Woken, timed out or spurious: consume whatever is there and let the caller re-check.
  state_.exchange(kEmpty, std::memory_order_acquire);
}

void Parker::nap(Clock::time_point until) noexcept {
  std::uint32_t expected = kEmpty;
  if (state_.compare_exchange_strong(expected, kParked, std::memory_order_acquire)) {
    futex_wait(state_, kParked, until);
  }
  state_.exchange(kEmpty, std::memory_order_acquire);
}

WaitPacer::WaitPacer(bool nap) noexcept : nap_(nap) {
  if (!nap_) return;
  const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  if (slack > 1000 && prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0) == 0) saved_slack_ns_ = slack;
}

WaitPacer::~WaitPacer() {
  if (saved_slack_ns_ >= 0) prctl(PR_SET_TIMERSLACK, saved_slack_ns_, 0, 0, 0);
}

void WaitPacer::park(Parker& parker, const Deadline& deadline) noexcept {
  if (!nap_) {
    parker.park(deadline);
    return;
  }
  const Clock::time_point nap_end = Clock::now() + kNap;
  parker.nap(deadline ? std::min(*deadline, nap_end) : nap_end);
}

void Parker::unpark() noexcept {
  if (state_.exchange(kNotified, std::memory_order_release) == kParked) futex_wake_one(state_);
}

namespace {
thread_local BlockingObserver* tls_blocking_observer = nullptr;
}  // namespace

void set_blocking_observer(BlockingObserver* observer) noexcept { tls_blocking_observer = observer; }

BlockingRegion::BlockingRegion() noexcept : observer_(tls_blocking_observer) {
  if (observer_) observer_->blocking_begins();
}

BlockingRegion::~BlockingRegion() {
  if (observer_) observer_->blocking_ends();
}

const Ref<Parker>& this_thread_parker() {
  thread_local const Ref<Parker> parker = make_ref<Parker>();
  return parker;
}

}  // namespace eventide::detail
