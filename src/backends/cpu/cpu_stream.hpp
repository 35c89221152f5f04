// The CPU backend's streams and the worker threads that run them.
//
// A CPU stream is a FIFO of Works. It owns no thread: when it gets work and no worker serves
// it, the pool attaches one (an idle worker, else a new thread). The worker runs the
// stream's Works in order (execute_work: deps, body, timing, advance) and stays attached
// while work keeps coming, detaching after a short idle spell. So a program with a thousand
// idle streams has no thread for them, and an active stream always has exactly one: the
// stream's order is that thread's order, and a stream waiting on another never holds up a
// third (each waits on its own thread, like GPU streams).
//
// Lifetime: while a stream has queued work, its worker holds a reference to it, so dropping
// every handle never loses work. Shutdown: the pool's stop flag makes every queued Work fail
// ("runtime shut down") instead of running; the running one finishes (kExitGrace at most);
// threads are joined.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/runtime_thread.hpp"
#include "core/stream_state.hpp"

namespace eventide::backends::cpu {

using detail::Parker;
using detail::Ref;
using detail::StreamState;
using detail::Work;

class WorkerPool;

class CpuStream final : public StreamState {
 public:
  CpuStream(Device device, std::uint64_t id, WorkerPool& pool)
      : StreamState(device, id), pool_(pool) {}
  ~CpuStream() override;

 protected:
  void submit(Ref<Work> work) noexcept override;

 private:
  friend class WorkerPool;
  // Takes the whole queue (a list linked through Work::next, oldest first); null if empty.
  Work* take_all() noexcept;
  void attach(const Ref<Parker>& worker) noexcept;
  // Detaches the worker if the queue is still empty (true), else keeps it (false).
  bool try_detach() noexcept;

  WorkerPool& pool_;
  detail::RuntimeMutex mu_;
  Work* head_ = nullptr;
  Work* tail_ = nullptr;
  bool scheduled_ = false;   // a worker serves it, or it waits for one
  Ref<Parker> worker_;       // the attached worker's parker
};

class WorkerPool {
 public:
  WorkerPool() = default;
  ~WorkerPool() { stop(detail::Clock::now() + detail::kExitGrace); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Gives `stream` a worker.
  void assign(std::shared_ptr<CpuStream> stream) noexcept;
  // Fails what is queued, waits for what runs until `deadline`, stops the threads.
  void stop(detail::Clock::time_point deadline) noexcept;
  // Becomes true when the pool stops: work that has not started fails instead of running.
  const std::atomic<bool>& stopping() const noexcept { return stop_; }
  // Threads started so far (for `eventide info` and the tests).
  std::size_t thread_count();

 private:
  struct Worker {
    Ref<Parker> parker = detail::make_ref<Parker>();
    std::shared_ptr<CpuStream> stream;  // assigned, not yet taken
    bool idle = false;
    detail::RuntimeThread thread;
  };
  void run(Worker& w) noexcept;
  void serve(CpuStream& s, Worker& w) noexcept;

  detail::RuntimeMutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;
  std::deque<std::shared_ptr<CpuStream>> waiting_;  // no thread could be started for them
  std::atomic<bool> stop_{false};
};

}  // namespace eventide::backends::cpu
