// The fork registry (core/fork.hpp).
#include "core/fork.hpp"

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace eventide::detail {

namespace {

constexpr std::size_t kStages = static_cast<std::size_t>(ForkStage::count);

struct AtomicSteps {
  std::atomic<void (*)() noexcept> prepare{nullptr};
  std::atomic<void (*)() noexcept> parent{nullptr};
  std::atomic<void (*)() noexcept> child{nullptr};
};
// Constant-initialized: usable from any static initializer, and by a fork at any time.
AtomicSteps g_steps[kStages];

// The handler set may be installed twice (install_fork_handlers): the outermost call of each
// step acts. Per thread: the forking thread runs all three (the child, as its only one).
thread_local int tls_fork_nesting = 0;

void run_prepare() noexcept {
  if (tls_fork_nesting++ > 0) return;
  for (std::size_t i = 0; i < kStages; ++i) {
    if (auto step = g_steps[i].prepare.load(std::memory_order_acquire)) step();
  }
}

void run_parent() noexcept {
  if (--tls_fork_nesting > 0) return;
  for (std::size_t i = kStages; i-- > 0;) {
    if (auto step = g_steps[i].parent.load(std::memory_order_acquire)) step();
  }
}

void run_child() noexcept {
  if (--tls_fork_nesting > 0) return;
  for (std::size_t i = kStages; i-- > 0;) {
    if (auto step = g_steps[i].child.load(std::memory_order_acquire)) step();
  }
}

}  // namespace

void install_fork_handlers() noexcept { ::pthread_atfork(&run_prepare, &run_parent, &run_child); }

void set_fork_steps(ForkStage stage, ForkSteps steps) noexcept {
  static std::once_flag installed;
  AtomicSteps& s = g_steps[static_cast<std::size_t>(stage)];
  s.prepare.store(steps.prepare, std::memory_order_release);
  s.parent.store(steps.parent, std::memory_order_release);
  s.child.store(steps.child, std::memory_order_release);
  std::call_once(installed, install_fork_handlers);
}

}  // namespace eventide::detail
