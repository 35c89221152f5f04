#include "core/runtime_lock.hpp"

#include <atomic>
#include <utility>
#include <vector>

namespace eventide::detail {

namespace {

struct Deferred {
  void (*fn)(void*);
  void* arg;
};

thread_local std::vector<Deferred>* tls_deferred = nullptr;  // created at first use
std::atomic<std::uint64_t> g_deferred_count{0};

}  // namespace

[[gnu::tls_model("initial-exec")]] thread_local int tls_runtime_lock_depth = 0;
[[gnu::tls_model("initial-exec")]] thread_local bool tls_runtime_releases_pending = false;

void run_deferred_releases() noexcept {
  // Each may release more (which then runs at once: no lock is held here). The releases are
  // taken off the list before they run: one may take and let go of runtime locks (a __del__
  // calling eventide, Python's cycle collector visiting an event under its lock), and letting
  // go of the last must not run the others from inside it (a release inside a collection
  // would corrupt it). Those deferred meanwhile are run by that inner unlock, or by this loop.
  while (tls_runtime_releases_pending) {
    tls_runtime_releases_pending = false;
    std::vector<Deferred> batch;
    batch.swap(*tls_deferred);
    while (!batch.empty()) {
      Deferred d = batch.back();
      batch.pop_back();
      d.fn(d.arg);
    }
  }
}

void run_when_unlocked(void (*fn)(void*), void* arg) noexcept {
  if (tls_runtime_lock_depth == 0) {
    fn(arg);
    return;
  }
  try {
    if (!tls_deferred) tls_deferred = new std::vector<Deferred>();  // one per thread, kept
    tls_deferred->push_back(Deferred{fn, arg});
    tls_runtime_releases_pending = true;
    g_deferred_count.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    // Out of memory: leaked, never released under a lock.
  }
}

std::uint64_t deferred_releases() noexcept { return g_deferred_count.load(std::memory_order_relaxed); }

}  // namespace eventide::detail
