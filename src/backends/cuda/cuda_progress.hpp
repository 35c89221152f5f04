// How the end of each GPU op reaches its stream's timeline, and how another stream waits for
// it on the GPU: one strategy per device, chosen when the device is found (choose_progress).
//
// * Stream memory operations (StreamMemOpsProgress), where the device has them: after an op
//   (after a burst of ops, where the stream lets it be left for later: DeviceStream's
//   "Published"), cuStreamWriteValue64 writes the op's sequence number into the timeline's
//   counter, a pinned word, after a system-scope fence, so the host reads completion with a
//   load and the watcher only retires. A stream of a device that has them too waits for it on the GPU
//   (cuStreamWaitValue64 on the counter).
// * CUDA events (EventProgress), where it has not (or EVENTIDE_CUDA_MEMOPS=0): each op
//   records an event from the device's pool (cuda_event_pool.hpp) after it; the watcher
//   queries them in order and advances the counter itself; other streams wait on the event
//   (cudaStreamWaitEvent). The event is the op's until the op retires.
//
// A dependency between devices uses the producer's strategy (its counter or its events), and
// a consumer that cannot wait that way holds its op on the host until the producer finishes
// (CudaStream::host_wait).
//
// Thread-safety: every member, from any thread; end_work, can_wait_on_gpu and wait_on_gpu are
// called under the stream's launch lock, publish_through under its publication lock,
// finished_through under its in-flight lock; the strategies' own locks are leaves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/work.hpp"
#include "core/work_list.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

using detail::WorkList;

class CudaStream;
class CudaTimeline;

class ProgressPublisher {
 public:
  virtual ~ProgressPublisher() = default;

  // For DeviceInfo: "written by the GPU (stream memory operations)", ...
  virtual std::string describe() const = 0;

  // --- Launch side (under the stream's launch lock) ---

  // The end of `work`, just launched on `stream` (of this device), before its publication.
  // DeviceError (or std::bad_alloc) if it cannot: the caller takes the device for lost.
  virtual void end_work(CudaStream& stream, detail::Work& work) = 0;
  // Whether the publication may be left for later and made for many ops at once, from any
  // thread (DeviceStream::can_publish_later).
  virtual bool can_publish_later() const noexcept = 0;
  // Publishes the end of every op launched on `stream` through `seq`: the timeline will show
  // them finished once the GPU has run them. Under the stream's publication lock, from any
  // thread, with the device current. DeviceError if it cannot: the device is lost.
  virtual void publish_through(CudaStream& stream, std::uint64_t seq) = 0;
  // Whether a stream of `consumer` can wait on the GPU for `work`, launched (not finished) on
  // a stream of this device, instead of holding its op on the host.
  virtual bool can_wait_on_gpu(const ProgressPublisher& consumer, const detail::Work& work) = 0;
  // Orders what `consumer` launches next after `work` (on `producer`, a timeline of this
  // device), on the GPU; nothing where it cannot (can_wait_on_gpu held the op until `work`
  // finished). DeviceError.
  virtual void wait_on_gpu(CudaStream& consumer, const CudaTimeline& producer,
                           const detail::Work& work) = 0;
  // Whether streams of this device can wait on another device's counter on the GPU
  // (cuStreamWaitValue64).
  virtual bool waits_on_counters() const noexcept = 0;

  // --- Watcher side ---

  // Whether the GPU writes the timeline's counter itself: then nothing in flight has finished
  // while the counter is below the oldest in-flight op, and the watcher looks without a lock.
  virtual bool gpu_writes_counter() const noexcept = 0;
  // The sequence number through which the in-flight ops (oldest first) have finished, given
  // the timeline's counter `completed`. Under the stream's in-flight lock. Allocates nothing.
  virtual std::uint64_t finished_through(std::uint64_t completed, const WorkList& inflight) noexcept = 0;
  // The ops through `seq` have finished: the timeline shows it (the events' strategy advances
  // the counter; the GPU has written it already with memory operations).
  virtual void reached(CudaTimeline& timeline, std::uint64_t seq) noexcept = 0;
  // `work` has retired: what end_work() took for it goes back.
  virtual void retired(const detail::Work& work) noexcept = 0;
};

// The strategy for `device` (current on the calling thread or not): stream memory operations
// where the driver and the device have them and EVENTIDE_CUDA_MEMOPS is not "0", else events.
std::unique_ptr<ProgressPublisher> choose_progress(Device device);

}  // namespace eventide::backends::cuda
