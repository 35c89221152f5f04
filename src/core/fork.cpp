// The fork registry (core/fork.hpp).
#include "core/fork.hpp"

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace eventide::detail {

namespace {

constexpr std::size_t kStages = static_cast<std::size_t>(ForkStage::count);

// A stage's steps: written once (state empty -> writing), then published (-> set, release);
// a fork reads them only once it has seen `set` (acquire), so it never sees a stage's parent
// or child step without its prepare.
enum StageState : int { kEmpty, kWriting, kSet };
struct StageSteps {
  ForkSteps steps;
  std::atomic<int> state{kEmpty};
};
// Constant-initialized: usable from any static initializer, and by a fork at any time.
StageSteps g_steps[kStages];
// The steps of the fork under way, copied by its outermost prepare: its parent and child steps
// are those of the stages whose prepare ran. (Forks are serialized by the C library, which
// holds its lock of the handlers from the prepare step to the parent or child one.)
ForkSteps g_this_fork[kStages];

// The handler set may be installed twice (install_fork_handlers): the outermost call of each
// step acts. Per thread: the forking thread runs all three (the child, as its only one).
thread_local int tls_fork_nesting = 0;

void run_prepare() noexcept {
  if (tls_fork_nesting++ > 0) return;
  for (std::size_t i = 0; i < kStages; ++i) {
    g_this_fork[i] = g_steps[i].state.load(std::memory_order_acquire) == kSet ? g_steps[i].steps : ForkSteps{};
  }
  for (std::size_t i = 0; i < kStages; ++i) {
    if (auto step = g_this_fork[i].prepare) step();
  }
}

void run_parent() noexcept {
  if (--tls_fork_nesting > 0) return;
  for (std::size_t i = kStages; i-- > 0;) {
    if (auto step = g_this_fork[i].parent) step();
  }
}

void run_child() noexcept {
  if (--tls_fork_nesting > 0) return;
  for (std::size_t i = kStages; i-- > 0;) {
    if (auto step = g_this_fork[i].child) step();
  }
}

}  // namespace

void install_fork_handlers() noexcept { ::pthread_atfork(&run_prepare, &run_parent, &run_child); }

void set_fork_steps(ForkStage stage, ForkSteps steps) noexcept {
  static std::once_flag installed;
  StageSteps& s = g_steps[static_cast<std::size_t>(stage)];
  int empty = kEmpty;
  // No lock: a forked child may set a stage whatever the parent's threads held.
  if (s.state.compare_exchange_strong(empty, kWriting, std::memory_order_acquire)) {
    s.steps = steps;
    s.state.store(kSet, std::memory_order_release);
  }
  std::call_once(installed, install_fork_handlers);
}

}  // namespace eventide::detail
