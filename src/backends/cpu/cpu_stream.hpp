// The CPU backend's streams and the bounded pool of threads that runs them.
//
// A CPU stream is a FIFO of Works. It owns no thread. When it gets work it becomes *ready*
// and the pool gives it a thread, which runs its Works in order (deps passed, body, timing,
// advance). When the next Work waits for a dependency that has not passed (a fence on
// another stream, a UserEvent), the stream *parks*: the thread leaves it and goes on with
// another ready stream, and a listener on that fence makes the stream ready again when it
// passes. So the number of threads follows the number of streams with runnable work, not
// the number of streams: 10,000 streams gated on one UserEvent hold no thread at all.
//
// The pool starts threads as streams become ready, up to `max_threads` (the cores plus two;
// EVENTIDE_CPU_THREADS overrides it) busy ones. A thread whose op body blocks in a runtime
// wait (it waits for an event or a stream: core/parker.hpp's BlockingRegion) does not count
// while it waits, so work it waits for can still get a thread. A stream that keeps a thread
// busy for longer than a time slice while others are ready goes to the back of the queue.
// Threads idle for kIdleExit exit, all but one. When the OS refuses a thread, ready streams
// wait for one of the existing threads; the first launch on a pool without any thread fails
// with DeviceError instead (nothing would run it).
//
// Lifetime: a stream with queued work is held by the pool (ready queue, its thread) or by the
// listener it is parked on, so dropping every handle never loses work. Shutdown: the stop
// flag makes every queued Work fail ("runtime shut down") instead of running, parked streams
// included; the running ones finish (until the runtime's exit deadline); threads are joined.
//
// fork(): before it, the pool pauses (no new Work starts) and waits, bounded, for the bodies
// that run; in the parent it resumes; in the child, whose threads are gone, it starts over
// with the queues as they were: queued work runs there too, and a Work whose body was still
// running at the fork fails ("interrupted by fork").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/fork.hpp"
#include "core/parker.hpp"
#include "core/runtime_lock.hpp"
#include "core/runtime_thread.hpp"
#include "core/stream_state.hpp"

namespace eventide::backends::cpu {

using detail::Parker;
using detail::Ref;
using detail::StreamState;
using detail::Work;

class WorkerPool;

// Whether a stream whose thread gives it up waits for a dependency (parked: a listener will
// resume it) or can run on (ready).
enum class Parking { ready, parked };
// Where a ready stream joins the ready list: behind the others, or first (a stream whose time
// slice was cut short by a fork's pause, or that goes on at once).
enum class QueueEnd { back, front };

class CpuStream final : public StreamState {
 public:
  CpuStream(Device device, std::uint64_t id, WorkerPool& pool)
      : StreamState(device, id), pool_(pool) {}
  ~CpuStream() override;

 protected:
  void check_submit() const override;
  void submit(Ref<Work> work) noexcept override;

 private:
  friend class WorkerPool;

  // Makes the stream ready again when the fence it is parked on passes. Kept in the stream so
  // that parking allocates nothing (the pool parks streams where nothing may fail): a stream
  // is parked on one fence at a time, and parks again only after this fired (stop() resumes
  // parked streams without it, but nothing parks once the pool stops). While registered it
  // holds the stream.
  class ResumeListener final : public detail::Listener {
   public:
    void hold(std::shared_ptr<CpuStream> stream) noexcept { stream_ = std::move(stream); }
    void fire() noexcept override;
    void dropped() noexcept override { std::shared_ptr<CpuStream> s = std::move(stream_); }

   private:
    std::shared_ptr<CpuStream> stream_;
  };

  // Takes the whole queue (a list linked through Work::next, oldest first); null if empty.
  Work* take_all() noexcept;
  // Puts `rest` (a list, oldest first, not run yet) back at the head of the queue; with
  // Parking::parked, the stream is parked (a listener will resume() it).
  void put_back(Work* rest, Parking parking) noexcept;
  // Ends the thread's turn if nothing is queued (true: the stream is idle), else false.
  bool try_release() noexcept;
  // Makes a parked stream ready again (true), once; false if it was not parked.
  bool unpark_from_dependency() noexcept;

  WorkerPool& pool_;
  detail::RuntimeMutex mu_;
  Work* head_ = nullptr;
  Work* tail_ = nullptr;
  bool scheduled_ = false;  // ready, served by a thread, or parked
  bool parked_ = false;     // parked on a dependency's fence
  ResumeListener resume_;   // registered while parked
  // The pool's lists (under the pool's lock): the ready queue, and the parked streams.
  std::shared_ptr<CpuStream> next_ready_;
  CpuStream* parked_prev_ = nullptr;
  CpuStream* parked_next_ = nullptr;
  bool in_parked_list_ = false;
};

class WorkerPool final : private detail::BlockingObserver {
 public:
  WorkerPool();
  ~WorkerPool() { stop(detail::Clock::now() + detail::kExitGrace); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a stream that has work to run and gives it a thread (an idle one, else a new one
  // while fewer than max_threads are busy).
  void make_ready(std::shared_ptr<CpuStream> stream) noexcept;
  // DeviceError if the pool has no thread and cannot start one (work would never run).
  void ensure_thread();
  // Fails what is queued and parked, waits for what runs until `deadline`, stops the threads.
  void stop(detail::Clock::time_point deadline) noexcept;
  // Becomes true when the pool stops: work that has not started fails instead of running.
  const std::atomic<bool>& stopping() const noexcept { return stop_; }

  // fork(): see the file comment. before_fork waits for running bodies until `deadline`
  // (that of the calling thread excepted) and, with `hold`, keeps the pool's lock until
  // after the fork (the child's pool then starts with it free); calls nest.
  void before_fork(detail::Clock::time_point deadline, detail::ForkLocks locks) noexcept;
  void after_fork_in_parent(detail::ForkLocks locks) noexcept;
  // The child's pool after a before_fork(…, ForkLocks::hold) in the parent.
  void after_fork_in_child() noexcept;

  std::size_t max_threads() const noexcept { return max_threads_; }

 private:
  struct Worker {
    Ref<Parker> parker = detail::make_ref<Parker>();
    detail::RuntimeThread thread;
    bool idle = false;
    // What the thread serves now, and the Works it has taken from it but not run (the one
    // running first): in a forked child, whose copy of the thread is gone, they are resumed.
    std::shared_ptr<CpuStream> stream;
    Work* running = nullptr;
    Work* rest = nullptr;
  };
  void run(Worker& w) noexcept;
  void serve(CpuStream& s, Worker& w) noexcept;
  // Puts a stream this thread serves back in the ready queue (a fork pauses the pool, or its
  // time slice is over).
  void requeue(std::shared_ptr<CpuStream> stream, QueueEnd end) noexcept;
  // Fails everything `s` has queued, on the calling thread (the pool has stopped and has no
  // thread left). The caller holds the right to serve it (it made it ready).
  void serve_stopped(CpuStream& s) noexcept;
  // Under mu_: starts a thread (false if the OS refuses).
  bool start_thread_locked() noexcept;
  // Under mu_: wakes an idle thread, or starts one if fewer than max_threads are busy.
  void find_thread_locked() noexcept;
  // Parks `s` on `dep`'s fence; `rest` (the Works not run) goes back to its queue.
  void park_on(CpuStream& s, Work* rest, const detail::Dep& dep) noexcept;
  // The intrusive lists, under mu_: nothing here allocates.
  void push_ready_locked(std::shared_ptr<CpuStream> stream, QueueEnd end) noexcept;
  std::shared_ptr<CpuStream> pop_ready_locked() noexcept;
  void link_parked_locked(CpuStream& s) noexcept;
  void unlink_parked_locked(CpuStream& s) noexcept;
  void blocking_begins() noexcept override;
  void blocking_ends() noexcept override;

  const std::size_t max_threads_;
  detail::RuntimeMutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // most recently idle last
  CpuStream* parked_ = nullptr;  // the parked streams (held alive by their listener)
  std::size_t live_ = 0;                   // threads running (the records may outlive them)
  std::atomic<std::size_t> alive_{0};      // live_, for ensure_thread's look without mu_
  // The ready queue, linked through CpuStream::next_ready_ (a stream is in it at most once).
  std::shared_ptr<CpuStream> ready_head_;
  CpuStream* ready_tail_ = nullptr;
  std::size_t ready_size_ = 0;
  std::atomic<std::size_t> ready_count_{0};  // ready_size_, for the time-slice check
  // For before_fork's wait: made with the pool, not when a fork comes (nothing may fail then).
  const Ref<Parker> fork_waiter_ = detail::make_ref<Parker>();
  std::size_t busy_ = 0;
  std::size_t blocked_ = 0;
  std::string refused_why_;  // the OS's reason the last time it refused a thread
  unsigned paused_ = 0;  // fork in progress: no Work starts
  Ref<Parker> pause_waiter_;
  std::atomic<bool> pausing_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace eventide::backends::cpu
