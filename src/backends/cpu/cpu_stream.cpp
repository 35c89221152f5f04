#include "backends/cpu/cpu_stream.hpp"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>
#include <utility>

#include "core/profiler_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cpu {

namespace {

// A thread idle this long exits (all but the last one).
constexpr std::chrono::seconds kIdleExit{2};
// A stream that has kept its thread this long goes to the back of the queue when other
// streams are ready (checked between its Works).
constexpr std::chrono::milliseconds kTimeSlice{2};

std::size_t read_max_threads() noexcept {
  if (const char* env = std::getenv("EVENTIDE_CPU_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 4096) return static_cast<std::size_t>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency()) + 2;
}

// The pool whose thread this is (run()), else null.
thread_local WorkerPool* tls_pool = nullptr;

}  // namespace

// Makes a parked stream ready again when the fence it waits for passes.
class ResumeListener final : public detail::Listener {
 public:
  explicit ResumeListener(std::shared_ptr<CpuStream> stream) : stream_(std::move(stream)) {}
  void fire() noexcept override {
    if (stream_->unpark_from_dependency()) stream_->pool_.make_ready(std::move(stream_));
  }

 private:
  std::shared_ptr<CpuStream> stream_;
};

// --- CpuStream -----------------------------------------------------------------------------

CpuStream::~CpuStream() {
  // The pool holds a stream while anything is queued, so nothing can be left here.
  for (Work* w = head_; w;) {
    Work* next = w->next;
    w->release();
    w = next;
  }
}

void CpuStream::check_submit() const { pool_.ensure_thread(); }

void CpuStream::submit(Ref<Work> work) noexcept {
  if (work->is_marker() && timeline().passed(work->seq() - 1)) {
    // Everything before it has finished and nothing else can be enqueued meanwhile (the
    // caller holds the submit lock), so its dependencies (the gate and the work before it,
    // both on this stream) have passed: the stream is at the marker now. It is reached
    // here, with this instant as its time, instead of waking a thread to reach it.
    detail::run_work(*work, pool_.stopping());
    return;
  }
  Work* raw = work.detach();  // the queue's reference
  bool ready = false;
  {
    std::lock_guard lock(mu_);
    if (tail_) {
      tail_->next = raw;
    } else {
      head_ = raw;
    }
    tail_ = raw;
    if (!scheduled_) ready = scheduled_ = true;
  }
  if (ready) pool_.make_ready(std::static_pointer_cast<CpuStream>(shared_from_this()));
}

Work* CpuStream::take_all() noexcept {
  std::lock_guard lock(mu_);
  Work* all = head_;
  head_ = tail_ = nullptr;
  return all;
}

void CpuStream::put_back(Work* rest, bool park) noexcept {
  std::lock_guard lock(mu_);
  parked_ = park;
  if (!rest) return;
  Work* last = rest;
  while (last->next) last = last->next;
  last->next = head_;
  if (!head_) tail_ = last;
  head_ = rest;
}

bool CpuStream::try_release() noexcept {
  std::lock_guard lock(mu_);
  if (head_) return false;
  scheduled_ = false;
  return true;
}

bool CpuStream::unpark_from_dependency() noexcept {
  std::lock_guard lock(mu_);
  return std::exchange(parked_, false);
}

// --- WorkerPool ----------------------------------------------------------------------------

WorkerPool::WorkerPool() : max_threads_(read_max_threads()) {}

void WorkerPool::make_ready(std::shared_ptr<CpuStream> stream) noexcept {
  std::unique_lock lock(mu_);
  parked_.erase(stream.get());
  if (stop_.load(std::memory_order_relaxed) && live_ == 0) {
    // Stopped, and no thread is left to take it: what it has queued fails here and now.
    lock.unlock();
    serve_stopped(*stream);
    return;
  }
  ready_.push_back(std::move(stream));
  ready_count_.store(ready_.size(), std::memory_order_relaxed);
  find_thread_locked();
}

void WorkerPool::requeue(std::shared_ptr<CpuStream> stream, bool front) noexcept {
  std::lock_guard lock(mu_);
  if (front) {
    ready_.push_front(std::move(stream));
  } else {
    ready_.push_back(std::move(stream));
  }
  ready_count_.store(ready_.size(), std::memory_order_relaxed);
}

void WorkerPool::find_thread_locked() noexcept {
  if (paused_ > 0) return;
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->idle = false;
    w->parker->unpark();
    return;
  }
  if (stop_.load(std::memory_order_relaxed)) return;
  // Threads that wait inside a body do not count: the work they wait for needs a thread.
  if (live_ - blocked_ < max_threads_) start_thread_locked();
  // Otherwise (or if the OS refused), the next thread to finish its turn takes the stream.
}

bool WorkerPool::start_thread_locked() noexcept {
  try {
    workers_.reserve(workers_.size() + 1);
    auto w = std::make_unique<Worker>();
    // The new thread blocks on mu_ until the caller lets go of it.
    w->thread = detail::RuntimeThread([this, raw = w.get()] { run(*raw); });
    workers_.push_back(std::move(w));
    alive_.store(++live_, std::memory_order_release);
    return true;
  } catch (const std::exception& e) {
    try {
      refused_why_ = e.what();
    } catch (...) {
    }
    return false;
  }
}

void WorkerPool::ensure_thread() {
  if (alive_.load(std::memory_order_acquire) > 0) [[likely]] return;
  std::lock_guard lock(mu_);
  if (live_ > 0 || stop_.load(std::memory_order_relaxed)) return;
  if (!start_thread_locked()) {
    throw DeviceError("cpu: no thread to run the work: the system refused to start one (" +
                          refused_why_ + "); the process is at its thread limit",
                      "pthread_create", EAGAIN);
  }
}

void WorkerPool::run(Worker& w) noexcept {
  pthread_setname_np(pthread_self(), "eventide-cpu");
  tls_pool = this;
  detail::set_blocking_observer(this);
  std::unique_lock lock(mu_);
  for (;;) {
    if (!ready_.empty() && paused_ == 0) {
      if (w.idle) {
        idle_.erase(std::find(idle_.begin(), idle_.end(), &w));
        w.idle = false;
      }
      w.stream = std::move(ready_.front());
      ready_.pop_front();
      ready_count_.store(ready_.size(), std::memory_order_relaxed);
      ++busy_;
      lock.unlock();
      serve(*w.stream, w);
      // The last reference may go here, with whatever it holds: not under mu_.
      std::shared_ptr<CpuStream> served = std::move(w.stream);
      served.reset();
      lock.lock();
      --busy_;
      if (pause_waiter_ && busy_ == 0) pause_waiter_->unpark();
      continue;
    }
    if (stop_.load(std::memory_order_relaxed)) {
      alive_.store(--live_, std::memory_order_release);
      return;
    }
    if (!w.idle) {
      w.idle = true;
      idle_.push_back(&w);
    }
    lock.unlock();
    const detail::Clock::time_point until = detail::Clock::now() + kIdleExit;
    w.parker->park(until);
    lock.lock();
    if (w.idle && detail::Clock::now() >= until && ready_.empty() && live_ > 1 &&
        paused_ == 0 && !stop_.load(std::memory_order_relaxed)) {
      // Idle for kIdleExit: the thread leaves (the last one stays, so that there is always
      // one to run what is submitted).
      idle_.erase(std::find(idle_.begin(), idle_.end(), &w));
      auto self = std::find_if(workers_.begin(), workers_.end(),
                               [&](const std::unique_ptr<Worker>& p) { return p.get() == &w; });
      std::unique_ptr<Worker> mine = std::move(*self);
      workers_.erase(self);
      alive_.store(--live_, std::memory_order_release);
      lock.unlock();
      // Its own RuntimeThread detaches it (a thread cannot join itself); nothing of the
      // pool is touched after this.
      mine.reset();
      return;
    }
  }
}

void WorkerPool::serve(CpuStream& s, Worker& w) noexcept {
  const detail::Clock::time_point slice_end = detail::Clock::now() + kTimeSlice;
  for (;;) {
    w.rest = s.take_all();
    if (!w.rest) {
      if (s.try_release()) return;
      continue;
    }
    while (w.rest) {
      Work* work = w.rest;
      if (pausing_.load(std::memory_order_acquire)) {
        // fork() in progress: the stream goes first in the queue, to go on after it.
        s.put_back(std::exchange(w.rest, nullptr), /*park=*/false);
        requeue(w.stream, /*front=*/true);
        return;
      }
      if (!stop_.load(std::memory_order_acquire)) {
        if (const detail::Dep* dep = detail::first_pending_dep(*work)) {
          park_on(s, std::exchange(w.rest, nullptr), *dep);
          return;
        }
      }
      w.running = work;
      w.rest = work->next;
      work->next = nullptr;
      detail::run_work(*work, stop_);
      w.running = nullptr;
      work->release();
      if (w.rest && ready_count_.load(std::memory_order_relaxed) > 0 &&
          detail::Clock::now() >= slice_end) {
        // Its time slice is over and other streams wait for a thread: they go first.
        s.put_back(std::exchange(w.rest, nullptr), /*park=*/false);
        requeue(w.stream, /*front=*/false);
        return;
      }
    }
  }
}

void WorkerPool::park_on(CpuStream& s, Work* rest, const detail::Dep& dep) noexcept {
  // Copied first: once the stream is parked, a stale listener (of an earlier park) may
  // resume it, and another thread may run `rest` and drop its deps.
  const Ref<detail::Timeline> timeline = dep.work->timeline_ref();
  const std::uint64_t seq = dep.work->seq();
  auto stream = std::static_pointer_cast<CpuStream>(s.shared_from_this());
  if (!rest->timed() && detail::profiling()) rest->set_reached(detail::host_now_ns());
  auto listener = std::make_unique<ResumeListener>(stream);
  {
    std::lock_guard lock(mu_);
    parked_.insert(&s);
  }
  s.put_back(rest, /*park=*/true);
  timeline->listen(seq, std::move(listener));
  // stop() resumes the streams parked when it runs; one parked after that resumes here.
  if (stop_.load(std::memory_order_acquire) && s.unpark_from_dependency()) make_ready(stream);
}

void WorkerPool::serve_stopped(CpuStream& s) noexcept {
  for (;;) {
    Work* rest = s.take_all();
    if (!rest && s.try_release()) return;
    while (rest) {
      Work* work = rest;
      rest = work->next;
      work->next = nullptr;
      detail::run_work(*work, stop_);  // fails it: the runtime shut down
      work->release();
    }
  }
}

void WorkerPool::blocking_begins() noexcept {
  std::lock_guard lock(mu_);
  ++blocked_;
  if (!ready_.empty()) find_thread_locked();
}

void WorkerPool::blocking_ends() noexcept {
  std::lock_guard lock(mu_);
  --blocked_;
}

void WorkerPool::stop(detail::Clock::time_point deadline) noexcept {
  std::vector<std::shared_ptr<CpuStream>> parked;
  {
    std::lock_guard lock(mu_);
    if (stop_.exchange(true)) return;
    for (CpuStream* s : parked_) parked.push_back(std::static_pointer_cast<CpuStream>(s->shared_from_this()));
  }
  // Their queued work fails now, in order, instead of waiting for fences that may never pass.
  for (auto& s : parked) {
    if (s->unpark_from_dependency()) make_ready(std::move(s));
  }
  std::vector<detail::RuntimeThread> threads;
  {
    std::lock_guard lock(mu_);
    for (auto& w : workers_) {
      w->parker->unpark();
      threads.push_back(std::move(w->thread));
    }
  }
  // Each thread fails what is ready and finishes what it runs; all stop together, so the
  // grace period is for the slowest, not the sum.
  for (auto& t : threads) t.join_until(deadline);
}

void WorkerPool::before_fork(detail::Clock::time_point deadline, bool hold) noexcept {
  std::unique_lock lock(mu_);
  if (paused_++ == 0) {
    pausing_.store(true, std::memory_order_release);
    // A body that forks is one of the running ones: it cannot finish first.
    const std::size_t own = tls_pool == this ? 1 : 0;
    const Ref<Parker> waiter = detail::this_thread_parker();
    pause_waiter_ = waiter;
    while (busy_ > own && detail::Clock::now() < deadline) {
      lock.unlock();
      waiter->park(deadline);
      lock.lock();
    }
    pause_waiter_ = nullptr;
  }
  if (hold) (void)lock.release();  // let go of in after_fork_*
}

void WorkerPool::after_fork_in_parent(bool held) noexcept {
  std::unique_lock lock = held ? std::unique_lock(mu_, std::adopt_lock) : std::unique_lock(mu_);
  if (paused_ == 0 || --paused_ > 0) return;
  pausing_.store(false, std::memory_order_release);
  for (std::size_t i = 0; i < ready_.size(); ++i) find_thread_locked();
}

void WorkerPool::after_fork_in_child() noexcept {
  // Only the forking thread exists here. The others' records are left as they are (never
  // destroyed: a thread that does not exist cannot be joined); what they were serving is
  // taken back.
  struct Taken {
    std::shared_ptr<CpuStream> stream;
    Work* running;
    Work* rest;
  };
  std::vector<Taken> taken;
  {
    std::lock_guard lock(mu_, std::adopt_lock);  // taken by before_fork(…, hold = true)
    for (auto& w : workers_) {
      if (w->stream) taken.push_back(Taken{std::move(w->stream), w->running, w->rest});
      w->thread.abandon();
      (void)w.release();
    }
    workers_.clear();
    idle_.clear();
    live_ = 0;
    alive_.store(0, std::memory_order_release);
    busy_ = blocked_ = 0;
    paused_ = 0;
    pause_waiter_ = nullptr;
    pausing_.store(false, std::memory_order_release);
  }
  for (Taken& t : taken) {
    if (Work* work = t.running) {
      // Its body was running on a thread the child does not have: it never finishes here.
      // It fails (its results are not to be trusted), and it is kept, never destroyed: its
      // body's state is whatever the fork caught.
      work->set_error(std::make_exception_ptr(StateError(
          work->describe() + " was interrupted by fork(): it was running in the parent, and "
                             "the child does not have the thread that ran it")));
      const std::int64_t now = detail::host_now_ns();
      work->set_times(now, now);
      work->timeline().advance(work->seq());
    }
    t.stream->put_back(t.rest, /*park=*/false);
    requeue(std::move(t.stream), /*front=*/true);
  }
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < ready_.size(); ++i) find_thread_locked();
}

}  // namespace eventide::backends::cpu
