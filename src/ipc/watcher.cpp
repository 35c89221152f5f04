// The importing process's watcher thread (watcher.hpp).
#include "ipc/watcher.hpp"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <thread>

#include "core/fork.hpp"
#include "core/runtime.hpp"
#include "ipc/liveness.hpp"

namespace eventide::ipc::detail {

namespace {

using eventide::detail::Runtime;

std::atomic<Watcher*> g_watcher{nullptr};

}  // namespace

void settle(Work& w, std::exception_ptr error) noexcept {
  const std::int64_t now = eventide::detail::host_now_ns();
  w.set_times(now, now);
  w.set_error(std::move(error));
}

Watcher& Watcher::get() {
  static Watcher* w = [] {
    auto* made = new Watcher;  // never freed: its thread runs until the process ends
    g_watcher.store(made, std::memory_order_release);
    // A new thread for the imports in a forked child (core/fork.hpp: after the runtime's).
    eventide::detail::set_fork_steps(eventide::detail::ForkStage::ipc_watcher,
                                     {.child = []() noexcept { Watcher::after_fork_in_child_if_made(); }});
    return made;
  }();
  return *w;
}

bool Watcher::settle_now_if_over(Import& imp) noexcept {
  return visit(imp, std::chrono::steady_clock::now());
}

void Watcher::after_fork_in_child_if_made() noexcept {
  if (Watcher* w = g_watcher.load(std::memory_order_acquire)) w->after_fork_in_child();
}

void Watcher::start_locked() {
  if (started_) return;
  std::thread(&Watcher::loop, this).detach();
  started_ = true;
}

void Watcher::defer(Retired r) {
  std::lock_guard lock(mu_);
  retired_.push_back(std::move(r));
  start_locked();
  wake_.fetch_add(1, std::memory_order_release);
  futex_wake_all(&wake_);
}

void Watcher::add(std::shared_ptr<Import> imp) {
  std::lock_guard lock(mu_);
  entries_.push_back(std::move(imp));
  start_locked();
  wake_.fetch_add(1, std::memory_order_release);
  futex_wake_all(&wake_);
}

void Watcher::after_fork_in_child() noexcept {
  // The thread is the parent's; the lock may have been held by it.
  new (&mu_) std::mutex;
  started_ = false;
  // The parent's deferred destroys: its events, its word to close; the copies are leaked.
  for (Retired& r : retired_) (void)r.native.release();
  retired_.clear();
  if (!entries_.empty()) {
    try {
      start_locked();
    } catch (...) {
      // No thread: the next import starts one.
    }
  }
}

bool Watcher::visit(Import& imp, std::chrono::steady_clock::time_point now) noexcept {
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

void Watcher::loop() noexcept {
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

void Watcher::retry_retired(std::vector<WaitV>& waiters) noexcept {
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

}  // namespace eventide::ipc::detail
