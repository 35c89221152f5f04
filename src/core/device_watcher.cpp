// The device watcher (device_watcher.hpp).
#include "core/device_watcher.hpp"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "core/device_stream.hpp"

namespace eventide::detail {

namespace {

// Watcher pacing: spin while progress comes; after this long without any, sleep, starting
// at the first sleep and doubling up to the last.
constexpr auto kSpinWithoutProgress = std::chrono::microseconds(200);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::milliseconds(2);
// While someone listens (a host thread blocked in wait, a callback, CPU work waiting for GPU
// work), the watcher is how they learn that the GPU finished: it spins longer and never
// sleeps more than this, so a wait on work that runs for milliseconds returns within about
// this much of its end instead of up to kLongestSleep late.
constexpr auto kSpinWhileListened = std::chrono::milliseconds(1);
constexpr auto kLongestSleepWhileListened = std::chrono::microseconds(50);
// The watcher's timer slack: its short sleeps end when asked, not up to 50 µs later (Linux's
// default slack).
constexpr unsigned long kWatcherTimerSlackNs = 1000;
// How long work may sit in flight without progress before the device's health is checked.
constexpr auto kHealthCheckAfter = std::chrono::milliseconds(20);
// The list's room: two entries per stream alive (a stream may be on it twice for a moment,
// see run()), and this many more, so that it does not grow one stream at a time.
constexpr std::size_t kEntriesPerStream = 2;
constexpr std::size_t kSpareEntries = 16;

}  // namespace

void DeviceWatcher::abandon_all(const std::exception_ptr& error) noexcept {
  for_each_watched([&](DeviceStream& s) { s.abandon(error); });
}

void DeviceWatcher::add_stream() {
  std::lock_guard lock(mu_);
  // A stream may be on the list twice for a moment (see run()).
  // (Adds are serialized by mu_; a concurrent remove only lowers the need.)
  const std::size_t n = streams_.load(std::memory_order_relaxed) + 1;
  if (watched_.capacity() < kEntriesPerStream * n) watched_.reserve(kEntriesPerStream * n + kSpareEntries);
  streams_.fetch_add(1, std::memory_order_relaxed);  // after the reserve: it may throw
}

void DeviceWatcher::remove_stream() noexcept {
  // No mu_: this runs in a stream's destructor, and a stream's last reference may be dropped where mu_
  // is held (a std::mutex taken twice by one thread never returns: the watcher hung there,
  // and with it every later check_submit, watch and stop). The room stays reserved.
  streams_.fetch_sub(1, std::memory_order_relaxed);
}

void DeviceWatcher::ensure_started() {
  if (started_.load(std::memory_order_acquire)) return;  // every submit asks: no lock then
  // (A backend's own start-up is the thread's: on_thread_start. Not here: it may wait.)
  std::lock_guard lock(mu_);
  if (!thread_.joinable() && !stop_.load()) thread_ = RuntimeThread([this] { run(); });
  if (thread_.joinable()) started_.store(true, std::memory_order_release);
}

void DeviceWatcher::watch(std::shared_ptr<DeviceStream> stream) noexcept {
  {
    std::lock_guard lock(mu_);
    // No allocation: add_stream() made room for every stream, twice.
    watched_.push_back(std::move(stream));
    watched_version_.fetch_add(1, std::memory_order_release);
    if (!thread_.joinable() && !stop_.load()) {
      try {
        thread_ = RuntimeThread([this] { run(); });  // started by check_submit normally
      } catch (...) {
      }
    }
  }
  parker_->unpark();
}

void DeviceWatcher::stop(Clock::time_point deadline) noexcept {
  stop_.store(true);
  parker_->unpark();
  RuntimeThread t;
  {
    std::lock_guard lock(mu_);
    t = std::move(thread_);
  }
  t.join_until(deadline);
}

namespace {

// The watcher's hold of its turn lock: a runtime lock while held (see turn_mu_).
class TurnLock {
 public:
  explicit TurnLock(std::timed_mutex& mu) : mu_(mu) {
    mu_.lock();
    runtime_lock_entered();
  }
  ~TurnLock() { unlock(); }
  TurnLock(const TurnLock&) = delete;
  TurnLock& operator=(const TurnLock&) = delete;
  void unlock() noexcept {
    if (!held_) return;
    held_ = false;
    mu_.unlock();
    runtime_lock_left();  // runs the releases the turn deferred, unlocked
  }

 private:
  std::timed_mutex& mu_;
  bool held_ = true;
};

}  // namespace

void DeviceWatcher::pause_for_fork(Clock::time_point deadline) noexcept {
  if (thread_id_.load(std::memory_order_acquire) == std::this_thread::get_id()) return;
  fork_wants_turn_.store(true, std::memory_order_release);
  fork_paused_ = turn_mu_.try_lock_until(deadline);
  if (!fork_paused_) fork_wants_turn_.store(false, std::memory_order_release);  // goes on
}

void DeviceWatcher::resume_after_fork() noexcept {
  if (!std::exchange(fork_paused_, false)) return;
  fork_wants_turn_.store(false, std::memory_order_release);
  turn_mu_.unlock();
}

void DeviceWatcher::forget_after_fork() noexcept { resume_after_fork(); }

void DeviceWatcher::run() noexcept {
  pthread_setname_np(pthread_self(), thread_name_);
  thread_id_.store(std::this_thread::get_id(), std::memory_order_release);
  prctl(PR_SET_TIMERSLACK, kWatcherTimerSlackNs, 0, 0, 0);
  on_thread_start();
  spinning_.store(true, std::memory_order_relaxed);
  using Clock = Clock;
  auto last_progress = Clock::now();
  auto sleep = std::chrono::nanoseconds(kFirstSleep);
  std::uint64_t wakes_seen = 0;
  std::vector<std::shared_ptr<DeviceStream>> streams;
  std::vector<std::shared_ptr<DeviceStream>> previous_streams;  // empty between turns
  std::uint64_t streams_version = ~std::uint64_t{0};
  while (!stop_.load(std::memory_order_acquire)) {
    while (fork_wants_turn_.load(std::memory_order_acquire)) std::this_thread::yield();
    TurnLock turn(turn_mu_);  // let go before sleeping or spinning
    // The list changes rarely: copied (under mu_, which launches also take) only when it has.
    // Out of memory for the copy, this turn takes the streams one by one from the list itself
    // (the watcher's loop must not fail), and the next turn tries to copy again.
    // The old copy's references are dropped only after mu_ is let go: the last reference to
    // a stream its user has dropped may be there, and a stream's destructor must not run under mu_.
    bool copied = true;
    if (watched_version_.load(std::memory_order_acquire) != streams_version) {
      {
        std::lock_guard lock(mu_);
        previous_streams.swap(streams);  // streams: the older buffer, emptied, its room kept
        try {
          streams.assign(watched_.begin(), watched_.end());
          streams_version = watched_version_.load(std::memory_order_relaxed);
        } catch (...) {
          streams.clear();
          streams.swap(previous_streams);  // as before the turn
          copied = false;
        }
      }
      previous_streams.clear();  // unlocked: may destroy streams
    }
    if (copied && streams.empty()) {
      turn.unlock();
      spinning_.store(false, std::memory_order_seq_cst);  // (a stream listed later unparks)
      parker_->park();
      spinning_.store(true, std::memory_order_relaxed);
      last_progress = Clock::now();
      continue;
    }
    const std::uint64_t wakes = wakes_.load(std::memory_order_acquire);
    bool progress = wakes != wakes_seen;
    wakes_seen = wakes;
    bool listened = false;
    const auto now = Clock::now();
    auto look_after = [&](DeviceStream& stream) {
      const std::uint64_t before = stream.timeline().completed();
      stream.release_if_due();
      stream.publish_if_due(now);
      if (stream.launched_since_look()) progress = true;  // (launches do not wake a turning watcher)
      bool more = stream.retire();
      if (stream.timeline().completed() != before || !more) progress = true;
      if (stream.timeline().has_listeners()) listened = true;
      if (!more) {
        std::lock_guard lock(mu_);
        // retire() cleared the stream's flag under its own lock: a submit after that has
        // pushed it again, so one copy is dropped here.
        for (auto it = watched_.begin(); it != watched_.end(); ++it) {
          if (it->get() == &stream) {
            watched_.erase(it);
            watched_version_.fetch_add(1, std::memory_order_release);
            break;
          }
        }
      }
    };
    if (copied) {
      for (const std::shared_ptr<DeviceStream>& stream : streams) look_after(*stream);
    } else {
      for_each_watched(look_after);
    }
    maintain();
    if (progress) {
      last_progress = now;
      sleep = kFirstSleep;
      continue;
    }
    if (now - last_progress > kHealthCheckAfter) check_health();
    turn.unlock();
    if (now - last_progress < (listened ? kSpinWhileListened : kSpinWithoutProgress)) {
      cpu_relax();
      continue;
    }
    if (listened) sleep = std::min<std::chrono::nanoseconds>(sleep, kLongestSleepWhileListened);
    // Launches stop waking the thread while spinning_ is set: from here on they do, and what
    // was launched before that is seen by this last look.
    spinning_.store(false, std::memory_order_seq_cst);
    bool launched = false;
    if (copied) {
      for (const std::shared_ptr<DeviceStream>& stream : streams) launched = stream->launched_since_look() || launched;
    } else {
      for_each_watched([&](DeviceStream& stream) { launched = stream.launched_since_look() || launched; });
    }
    if (launched) {
      spinning_.store(true, std::memory_order_relaxed);
      last_progress = now;
      sleep = kFirstSleep;
      continue;
    }
    parker_->park(now + sleep);
    spinning_.store(true, std::memory_order_relaxed);
    sleep = std::min<std::chrono::nanoseconds>(
        sleep * 2, listened ? std::chrono::nanoseconds(kLongestSleepWhileListened) : kLongestSleep);
  }
}

}  // namespace eventide::detail
