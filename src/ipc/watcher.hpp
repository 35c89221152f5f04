// The importing process's watcher (eventide/ipc.hpp): one thread per process, started at the
// first import (or the first deferred destroy of an exported native event).
//
// It waits on every watched state word at once (futex_waitv; where the kernel lacks it, it
// polls, backing off to 2 ms), finishes the imports' gates and verdicts, and every ~100 ms
// checks that the exporters still live (liveness.hpp). It also retries the destroys of this
// process's exported native events that importers still use (the users word, gpu_path.hpp),
// when that word changes. It holds no runtime lock; the Works it finishes fire their listeners
// inline, as UserEvent::set does.
//
// Thread-safety: add, defer and settle_now_if_over from any thread; the lists are under `mu_`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ipc/ends.hpp"

namespace eventide::ipc::detail {

class Watcher {
 public:
  // Made at the first call; never freed: its thread runs until the process ends.
  static Watcher& get();

  // Settles the import now if the exported work is over (or its exporter gone): true then,
  // and the import needs no watching.
  static bool settle_now_if_over(Import& imp) noexcept;

  // fork()'s child step (its stage, ForkStage::ipc_watcher), if a watcher was made.
  static void after_fork_in_child_if_made() noexcept;

  // Takes `r` to destroy once its importers have let go (try_destroy), retried when its users
  // word changes and at every liveness check.
  void defer(Retired r);
  // Watches `imp` until its word is final, or until nothing but the import holds its Works.
  void add(std::shared_ptr<Import> imp);

 private:
  Watcher() = default;
  void after_fork_in_child() noexcept;
  // Starts the thread if it is not running. Under mu_.
  void start_locked();
  // Looks at one import: finishes what its word says; true once it is final.
  static bool visit(Import& imp, std::chrono::steady_clock::time_point now) noexcept;
  void loop() noexcept;
  // Retries the deferred destroys; adds a waiter on the users word of each left.
  void retry_retired(std::vector<WaitV>& waiters) noexcept;

  std::mutex mu_;
  std::vector<Retired> retired_;  // deferred destroys of this process's exported native events
  std::vector<std::shared_ptr<Import>> entries_;
  std::atomic<std::uint32_t> wake_{0};
  bool started_ = false;
};

}  // namespace eventide::ipc::detail
