// RuntimeThread: a thread the runtime owns (a stream worker, a callback thread), joined with a
// time limit at process exit.
//
// At exit the runtime asks its threads to stop and waits for the work they are running to
// finish; but user code (a callback, an enqueued function) may block forever, and the process
// must still end. join_for() joins if the thread finishes in time, else detaches it: it runs
// on until the process ends, on memory the runtime never frees.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <utility>

#include "core/parker.hpp"

namespace eventide::detail {

class RuntimeThread {
 public:
  RuntimeThread() = default;
  template <class F>
  explicit RuntimeThread(F&& body)
      : done_(std::make_shared<std::atomic<std::uint32_t>>(0)),
        thread_([done = done_, body = std::forward<F>(body)]() mutable {
          // Also when the thread is ended by a forced unwind (pthread_exit): nobody waits
          // for it then.
          struct Finished {
            std::atomic<std::uint32_t>& done;
            ~Finished() {
              done.store(1, std::memory_order_release);
              futex_wake_all(done);
            }
          } finished{*done};
          body();
        }) {}
  RuntimeThread(RuntimeThread&&) noexcept = default;
  RuntimeThread& operator=(RuntimeThread&&) noexcept = default;
  ~RuntimeThread() { join_for(std::chrono::seconds(5)); }

  bool joinable() const noexcept { return thread_.joinable(); }

  void join_for(std::chrono::nanoseconds timeout) noexcept { join_until(deadline_after(timeout)); }

  // Forgets the thread without joining or detaching it: for the child of a fork(), where the
  // thread does not exist (its handle is leaked on purpose).
  void abandon() noexcept {
    if (thread_.joinable()) (void)new (std::nothrow) std::thread(std::move(thread_));
  }

  // Joins if the thread finishes by `deadline` (nullopt: however long it takes), else detaches
  // it. Several threads stopped together share one deadline this way.
  void join_until(const Deadline& deadline) noexcept {
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // asked to stop from its own code: it ends when that returns
      return;
    }
    while (done_->load(std::memory_order_acquire) == 0 && !expired(deadline)) {
      futex_wait(*done_, 0, deadline);
    }
    if (done_->load(std::memory_order_acquire) != 0) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }

 private:
  std::shared_ptr<std::atomic<std::uint32_t>> done_;
  std::thread thread_;
};

// How long shutdown waits for each runtime thread to finish what it is running.
inline constexpr std::chrono::seconds kExitGrace{5};

}  // namespace eventide::detail
