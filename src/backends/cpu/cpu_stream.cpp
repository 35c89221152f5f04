#include "backends/cpu/cpu_stream.hpp"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>
#include <utility>

#include "core/observer.hpp"
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

void CpuStream::ResumeListener::fire() noexcept {
  // Moved out first: once resumed, the stream may park (and hold itself here) again.
  std::shared_ptr<CpuStream> s = std::move(stream_);
  if (s->unpark_from_dependency()) s->pool_.make_ready(std::move(s));
}

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

void CpuStream::put_back(Work* rest, Parking parking) noexcept {
  std::lock_guard lock(mu_);
  parked_ = parking == Parking::parked;
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

void WorkerPool::push_ready_locked(std::shared_ptr<CpuStream> stream, QueueEnd end) noexcept {
  CpuStream* raw = stream.get();
  if (!ready_head_) {
    ready_head_ = std::move(stream);
    ready_tail_ = raw;
  } else if (end == QueueEnd::front) {
    raw->next_ready_ = std::move(ready_head_);
    ready_head_ = std::move(stream);
  } else {
    ready_tail_->next_ready_ = std::move(stream);
    ready_tail_ = raw;
  }
  ready_count_.store(++ready_size_, std::memory_order_relaxed);
}

std::shared_ptr<CpuStream> WorkerPool::pop_ready_locked() noexcept {
  std::shared_ptr<CpuStream> s = std::move(ready_head_);
  if (!s) return s;
  ready_head_ = std::move(s->next_ready_);
  if (!ready_head_) ready_tail_ = nullptr;
  ready_count_.store(--ready_size_, std::memory_order_relaxed);
  return s;
}

void WorkerPool::link_parked_locked(CpuStream& s) noexcept {
  if (s.in_parked_list_) return;
  s.in_parked_list_ = true;
  s.parked_prev_ = nullptr;
  s.parked_next_ = parked_;
  if (parked_) parked_->parked_prev_ = &s;
  parked_ = &s;
}

void WorkerPool::unlink_parked_locked(CpuStream& s) noexcept {
  if (!s.in_parked_list_) return;
  s.in_parked_list_ = false;
  (s.parked_prev_ ? s.parked_prev_->parked_next_ : parked_) = s.parked_next_;
  if (s.parked_next_) s.parked_next_->parked_prev_ = s.parked_prev_;
  s.parked_prev_ = s.parked_next_ = nullptr;
}

void WorkerPool::make_ready(std::shared_ptr<CpuStream> stream) noexcept {
  std::unique_lock lock(mu_);
  unlink_parked_locked(*stream);
  if (stop_.load(std::memory_order_relaxed) && live_ == 0) {
    // Stopped, and no thread is left to take it: what it has queued fails here and now.
    lock.unlock();
    serve_stopped(*stream);
    return;
  }
  push_ready_locked(std::move(stream), QueueEnd::back);
  find_thread_locked();
}

void WorkerPool::requeue(std::shared_ptr<CpuStream> stream, QueueEnd end) noexcept {
  std::lock_guard lock(mu_);
  push_ready_locked(std::move(stream), end);
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
    idle_.reserve(workers_.size() + 1);  // run() adds itself there, where nothing may fail
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
    if (ready_head_ && paused_ == 0) {
      if (w.idle) {
        idle_.erase(std::find(idle_.begin(), idle_.end(), &w));
        w.idle = false;
      }
      w.stream = pop_ready_locked();
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
    if (w.idle && detail::Clock::now() >= until && !ready_head_ && live_ > 1 &&
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
        s.put_back(std::exchange(w.rest, nullptr), Parking::ready);
        requeue(w.stream, QueueEnd::front);
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
        s.put_back(std::exchange(w.rest, nullptr), Parking::ready);
        requeue(w.stream, QueueEnd::back);
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
  if (!rest->timed() && detail::observer()) rest->set_reached(detail::host_now_ns());
  s.resume_.hold(stream);  // not registered: it fired, if the stream parked before
  {
    std::lock_guard lock(mu_);
    link_parked_locked(s);
  }
  s.put_back(rest, Parking::parked);
  timeline->listen(seq, s.resume_);  // allocates nothing
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
  if (ready_head_) find_thread_locked();
}

void WorkerPool::blocking_ends() noexcept {
  std::lock_guard lock(mu_);
  --blocked_;
}

void WorkerPool::stop(detail::Clock::time_point deadline) noexcept {
  // Nothing here allocates: it runs at exit, where nothing may fail.
  {
    std::lock_guard lock(mu_);
    if (stop_.exchange(true)) return;
  }
  // The parked streams' queued work fails now, in order, instead of waiting for fences that
  // may never pass. One at a time (make_ready takes them off the list); none parks any more.
  for (;;) {
    std::shared_ptr<CpuStream> s;
    {
      std::lock_guard lock(mu_);
      if (!parked_) break;
      s = std::static_pointer_cast<CpuStream>(parked_->shared_from_this());
      unlink_parked_locked(*s);
    }
    if (s->unpark_from_dependency()) make_ready(std::move(s));
  }
  std::size_t count;
  {
    std::lock_guard lock(mu_);
    for (auto& w : workers_) w->parker->unpark();
    count = workers_.size();  // the list does not change once stopping (no start, no exit)
  }
  // Each thread fails what is ready and finishes what it runs; all stop together, so the
  // grace period is for the slowest, not the sum. Joined in place: moving the threads out
  // would allocate.
  for (std::size_t i = 0; i < count; ++i) workers_[i]->thread.join_until(deadline);
}

void WorkerPool::before_fork(detail::Clock::time_point deadline, detail::ForkLocks locks) noexcept {
  std::unique_lock lock(mu_);
  if (paused_++ == 0) {
    pausing_.store(true, std::memory_order_release);
    // A body that forks is one of the running ones: it cannot finish first.
    const std::size_t own = tls_pool == this ? 1 : 0;
    const Ref<Parker> waiter = fork_waiter_;  // this_thread_parker() may allocate
    pause_waiter_ = waiter;
    while (busy_ > own && detail::Clock::now() < deadline) {
      lock.unlock();
      waiter->park(deadline);
      lock.lock();
    }
    pause_waiter_ = nullptr;
  }
  if (locks == detail::ForkLocks::hold) (void)lock.release();  // let go of in after_fork_*
}

void WorkerPool::after_fork_in_parent(detail::ForkLocks locks) noexcept {
  std::unique_lock lock = locks == detail::ForkLocks::hold ? std::unique_lock(mu_, std::adopt_lock)
                                                           : std::unique_lock(mu_);
  if (paused_ == 0 || --paused_ > 0) return;
  pausing_.store(false, std::memory_order_release);
  for (std::size_t i = 0; i < ready_size_; ++i) find_thread_locked();
}

void WorkerPool::after_fork_in_child() noexcept {
  // Only the forking thread exists here. The others' records are kept (never destroyed: a
  // thread that does not exist cannot be joined) and what they were serving is taken back.
  // Nothing here allocates but the error messages, which have a fallback.
  std::vector<std::unique_ptr<Worker>> gone;
  {
    std::lock_guard lock(mu_, std::adopt_lock);  // taken by before_fork(…, ForkLocks::hold)
    gone.swap(workers_);
    idle_.clear();
    live_ = 0;
    alive_.store(0, std::memory_order_release);
    busy_ = blocked_ = 0;
    paused_ = 0;
    pause_waiter_ = nullptr;
    pausing_.store(false, std::memory_order_release);
  }
  // First the Works whose bodies were running on a thread the child does not have: they never
  // finish here, so they fail (their results are not to be trusted), before anything after
  // them on their stream can run. Each is kept, never destroyed: its body's state is whatever
  // the fork caught.
  for (auto& w : gone) {
    Work* work = w->running;
    if (!work) continue;
    std::exception_ptr error;
    try {
      error = std::make_exception_ptr(StateError(
          work->describe() + " was interrupted by fork(): it was running in the parent, and "
                             "the child does not have the thread that ran it"));
    } catch (...) {
      error = detail::out_of_memory_error();
    }
    work->set_error(std::move(error));
    const std::int64_t now = detail::host_now_ns();
    work->set_times(now, now);
    work->timeline().advance(work->seq());
  }
  std::lock_guard lock(mu_);
  for (auto& w : gone) {
    if (w->stream) {
      w->stream->put_back(w->rest, Parking::ready);
      push_ready_locked(std::move(w->stream), QueueEnd::front);
    }
    w->thread.abandon();
    (void)w.release();
  }
  for (std::size_t i = 0; i < ready_size_; ++i) find_thread_locked();
}

}  // namespace eventide::backends::cpu
