#include "backends/cuda/cuda_progress.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_event_pool.hpp"
#include "backends/cuda/cuda_stream.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::backends::cuda {

using detail::Work;

namespace {

bool memops_disabled_by_env() {
  const char* env = std::getenv("EVENTIDE_CUDA_MEMOPS");
  return env && std::strcmp(env, "0") == 0;
}

CudaTimeline& timeline_of(CudaStream& stream) noexcept {
  return static_cast<CudaTimeline&>(stream.timeline());
}

// The GPU writes each op's number into the counter (cuStreamWriteValue64); other streams wait
// for it on the GPU (cuStreamWaitValue64).
class StreamMemOpsProgress final : public ProgressPublisher {
 public:
  std::string describe() const override { return "written by the GPU (stream memory operations)"; }

  void end_work(CudaStream&, Work&) override {}  // the counter's write is all

  bool can_publish_later() const noexcept override { return true; }

  void publish_through(CudaStream& stream, std::uint64_t seq) override {
    // The write is ordered after the ops and makes their results visible to the host first.
    check_driver(driver()->write_value64(reinterpret_cast<CUstream>(stream.handle()),
                                         timeline_of(stream).counter_address(), seq,
                                         CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue64", [&] { return "(progress of " + stream.name() + ")"; });
  }

  bool can_wait_on_gpu(const ProgressPublisher& consumer, const Work&) override {
    return consumer.waits_on_counters();
  }

  void wait_on_gpu(CudaStream& consumer, const CudaTimeline& producer, const Work& work) override {
    if (!consumer.owner().progress().waits_on_counters()) return;  // held until it finished
    check_driver(driver()->wait_value64(reinterpret_cast<CUstream>(consumer.handle()),
                                        producer.counter_address(), work.seq(),
                                        CU_STREAM_WAIT_VALUE_GEQ),
                 "cuStreamWaitValue64",
                 [&] { return "(" + consumer.name() + " waiting for " + work.describe() + ")"; });
  }

  bool waits_on_counters() const noexcept override { return true; }
  bool gpu_writes_counter() const noexcept override { return true; }

  std::uint64_t finished_through(std::uint64_t completed, const WorkList&) noexcept override {
    return completed;
  }
  void reached(CudaTimeline&, std::uint64_t) noexcept override {}  // the GPU wrote it
  void retired(const Work&) noexcept override {}
};

// Each op records an event from the device's pool after it; the watcher queries them in
// order and advances the counter; other streams wait on the event.
class EventProgress final : public ProgressPublisher {
 public:
  explicit EventProgress(Device device) noexcept : pool_(device) {}

  std::string describe() const override { return "CUDA events (no stream memory operations)"; }

  // Each op's own event is its publication: nothing is left for later.
  bool can_publish_later() const noexcept override { return false; }
  void publish_through(CudaStream&, std::uint64_t) override {}

  void end_work(CudaStream& stream, Work& work) override {
    PooledEvent done = pool_.take();
    // A failure gives the event back to the pool (the lease ends here): the caller takes the
    // device for lost, and the work fails.
    check(cudaEventRecord(done.get(), stream.handle()), "cudaEventRecord",
          [&] { return "(progress of " + stream.name() + ")"; });
    std::lock_guard lock(mu_);
    done_.insert_or_assign(&work, std::move(done));
  }

  bool can_wait_on_gpu(const ProgressPublisher&, const Work& work) override {
    // The watcher advances the counter before it retires the event: a Work whose event is gone
    // has finished (nothing to wait for), not become unwaitable.
    return done_event(work) != nullptr || work.done();
  }

  void wait_on_gpu(CudaStream& consumer, const CudaTimeline&, const Work& work) override {
    if (cudaEvent_t ev = done_event(work)) {
      check(cudaStreamWaitEvent(consumer.handle(), ev, 0), "cudaStreamWaitEvent",
            [&] { return "(" + consumer.name() + " waiting for " + work.describe() + ")"; });
    }
  }

  bool waits_on_counters() const noexcept override { return false; }
  bool gpu_writes_counter() const noexcept override { return false; }

  std::uint64_t finished_through(std::uint64_t completed, const WorkList& inflight) noexcept override {
    // In order; a work without an event failed to publish: the device is lost, and it has
    // failed.
    std::uint64_t reached = completed;
    for (Work* w = inflight.front(); w; w = w->next) {
      if (cudaEvent_t ev = done_event(*w); ev && cudaEventQuery(ev) != cudaSuccess) break;
      reached = std::max(reached, w->seq());  // (abandon may have raised completed past it)
    }
    return reached;
  }

  void reached(CudaTimeline& timeline, std::uint64_t seq) noexcept override { timeline.advance(seq); }

  void retired(const Work& work) noexcept override {
    PooledEvent done;  // back to the pool below, with mu_ let go
    std::lock_guard lock(mu_);
    if (auto it = done_.find(&work); it != done_.end()) {
      done = std::move(it->second);
      done_.erase(it);
    }
  }

 private:
  // The event recorded after `work`, while it is in flight (not retired); else null. The
  // event stays the work's until retired() (the caller uses it before the work retires).
  cudaEvent_t done_event(const Work& work) {
    std::lock_guard lock(mu_);
    auto it = done_.find(&work);
    return it == done_.end() ? nullptr : it->second.get();
  }

  EventPool pool_;
  detail::RuntimeMutex mu_;
  std::unordered_map<const Work*, PooledEvent> done_;  // by work in flight
};

}  // namespace

std::unique_ptr<ProgressPublisher> choose_progress(Device device) {
  if (const Driver* drv = driver(); drv && !memops_disabled_by_env()) {
    int supported = 0;
    if (drv->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                  device.index()) == CUDA_SUCCESS &&
        supported != 0) {
      return std::make_unique<StreamMemOpsProgress>();
    }
  }
  return std::make_unique<EventProgress>(device);
}

}  // namespace eventide::backends::cuda
