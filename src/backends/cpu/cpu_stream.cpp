#include "backends/cpu/cpu_stream.hpp"

#include <pthread.h>

#include <chrono>

namespace eventide::backends::cpu {

namespace {
// How long a worker stays with a stream that has run dry before going back to the pool.
constexpr std::chrono::milliseconds kIdleSpell{2};
}  // namespace

CpuStream::~CpuStream() {
  // A worker holds a reference while anything is queued, so nothing can be left here.
  for (Work* w = head_; w;) {
    Work* next = w->next;
    w->release();
    w = next;
  }
}

void CpuStream::submit(Ref<Work> work) noexcept {
  if (work->is_marker() && timeline().passed(work->seq() - 1)) {
    // Everything before it has finished and nothing else can be enqueued meanwhile (the
    // caller holds the submit lock): the stream is at the marker now. It is reached here,
    // with this instant as its time, instead of waking a worker to reach it.
    detail::execute_work(*work, detail::this_thread_parker(), pool_.stopping());
    return;
  }
  Work* raw = work.detach();  // the queue's reference
  bool assign = false;
  Ref<Parker> wake;
  {
    std::lock_guard lock(mu_);
    if (tail_) {
      tail_->next = raw;
    } else {
      head_ = raw;
    }
    tail_ = raw;
    if (!scheduled_) {
      scheduled_ = true;
      assign = true;
    } else {
      wake = worker_;
    }
  }
  if (assign) {
    pool_.assign(std::static_pointer_cast<CpuStream>(shared_from_this()));
  } else if (wake) {
    wake->unpark();
  }
}

Work* CpuStream::take_all() noexcept {
  std::lock_guard lock(mu_);
  Work* all = head_;
  head_ = tail_ = nullptr;
  return all;
}

void CpuStream::attach(const Ref<Parker>& worker) noexcept {
  std::lock_guard lock(mu_);
  worker_ = worker;
}

bool CpuStream::try_detach() noexcept {
  std::lock_guard lock(mu_);
  if (head_) return false;
  scheduled_ = false;
  worker_ = nullptr;
  return true;
}

void WorkerPool::assign(std::shared_ptr<CpuStream> stream) noexcept {
  std::unique_lock lock(mu_);
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->idle = false;
    w->stream = std::move(stream);
    lock.unlock();
    w->parker->unpark();
    return;
  }
  try {
    workers_.reserve(workers_.size() + 1);
    auto w = std::make_unique<Worker>();
    // The new thread blocks on mu_ until this function returns.
    w->thread = detail::RuntimeThread([this, raw = w.get()] { run(*raw); });
    w->stream = std::move(stream);
    workers_.push_back(std::move(w));
  } catch (...) {
    // No thread to be had (resource limits): the next worker to free up takes the stream.
    waiting_.push_back(std::move(stream));
  }
}

void WorkerPool::run(Worker& w) noexcept {
  pthread_setname_np(pthread_self(), "eventide-cpu");
  for (;;) {
    std::shared_ptr<CpuStream> s;
    {
      std::lock_guard lock(mu_);
      if (w.stream) {
        s = std::move(w.stream);
      } else if (!waiting_.empty()) {
        s = std::move(waiting_.front());
        waiting_.pop_front();
      } else if (stop_.load(std::memory_order_acquire)) {
        return;
      } else if (!w.idle) {
        w.idle = true;
        idle_.push_back(&w);
      }
    }
    if (!s) {
      w.parker->park();
      continue;
    }
    serve(*s, w);
  }
}

void WorkerPool::serve(CpuStream& s, Worker& w) noexcept {
  s.attach(w.parker);
  for (;;) {
    Work* batch = s.take_all();
    if (!batch) {
      const detail::Deadline until = detail::Clock::now() + kIdleSpell;
      while (!(batch = s.take_all())) {
        if (stop_.load(std::memory_order_acquire) || detail::expired(until)) break;
        w.parker->park(until);
      }
      if (!batch) {
        if (s.try_detach()) return;
        continue;
      }
    }
    while (batch) {
      Work* next = batch->next;
      batch->next = nullptr;
      detail::execute_work(*batch, w.parker, stop_);
      batch->release();
      batch = next;
    }
  }
}

void WorkerPool::stop(detail::Clock::time_point deadline) noexcept {
  std::vector<detail::RuntimeThread> threads;
  {
    std::lock_guard lock(mu_);
    if (stop_.exchange(true)) return;
    for (auto& w : workers_) {
      w->parker->unpark();
      threads.push_back(std::move(w->thread));
    }
  }
  // Each worker fails what is queued and finishes what it runs; all stop together, so the
  // grace period is for the slowest, not the sum.
  for (auto& t : threads) t.join_until(deadline);
}

std::size_t WorkerPool::thread_count() {
  std::lock_guard lock(mu_);
  return workers_.size();
}

}  // namespace eventide::backends::cpu
