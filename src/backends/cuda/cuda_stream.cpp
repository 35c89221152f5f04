#include "backends/cuda/cuda_stream.hpp"

#include <thread>
#include <utility>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_graph.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_progress.hpp"
#include "backends/cuda/cuda_timing.hpp"
#include "backends/cuda/cuda_timing_modes.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

using detail::Dep;
using detail::DepKind;
using detail::Ref;

namespace {

std::atomic<std::uint64_t>* as_counter(const PinnedWord& w) {
  // A pinned word the GPU writes with cuStreamWriteValue64 and the host reads: a lock-free
  // 64-bit atomic has the word's layout.
  static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));
  return reinterpret_cast<std::atomic<std::uint64_t>*>(w.host());
}

}  // namespace

// --- CudaTimeline ------------------------------------------------------------------------

CudaTimeline::CudaTimeline(std::string name, CudaDevice& device, PinnedWord word)
    : DeviceTimeline(std::move(name), as_counter(word), device), device_(device), word_(std::move(word)) {}

void CudaTimeline::await_timing(Work& work) { Timing::get().await(work); }

void CudaTimeline::await_timings(std::span<Work* const> works) { Timing::get().await_all(works); }

std::int64_t CudaTimeline::to_host_ns(std::int64_t device_ns) const noexcept {
  return Timing::get().to_host_ns(device_.device().index(), device_ns);
}

// --- CudaStream --------------------------------------------------------------------------

CudaStream::StreamSlot::StreamSlot(CudaDevice& d) : device(d) { device.watcher().add_stream(); }
CudaStream::StreamSlot::~StreamSlot() { device.watcher().remove_stream(); }

CudaStream::CudaStream(Device device, std::uint64_t id, CudaDevice& owner, std::string timeline_name,
                       StreamRef native)
    : DeviceStream(device, id,
                   detail::Ref<detail::DeviceTimeline>(
                       new CudaTimeline(std::move(timeline_name), owner, PinnedWord::acquire())),
                   owner),
      owner_(owner),
      native_(native),
      may_capture_(native.get() != nullptr),  // wrapped (an owned one binds its stream later)
      per_thread_(native.get() == cudaStreamPerThread),
      thread_(std::this_thread::get_id()),
      timeline_(static_cast<CudaTimeline&>(timeline())) {}

// The watcher holds the stream while work is in flight: nothing is left here.
CudaStream::~CudaStream() = default;

OwnedCudaStream::OwnedCudaStream(Device device, std::uint64_t id, CudaDevice& owner, int priority)
    : CudaStream(device, id, owner, detail::stream_name(device, id), StreamRef()), priority_(priority) {
  DeviceScope scope(device);
  own_ = OwnedStream::create(device, "for " + name(), priority);
  bind(own_);
}

OwnedCudaStream::~OwnedCudaStream() {
  // A stream destroyed with work still queued on the GPU (other code's) is released by CUDA
  // once that work completes. Here, not in own_'s destructor, for the stream's name in a
  // failure's message.
  own_.reset(name().c_str());
}

WrappedCudaStream::WrappedCudaStream(Device device, std::uint64_t id, CudaDevice& owner,
                                     StreamRef native, const std::string& what)
    : CudaStream(device, id, owner, detail::stream_name(device, id) + " (" + what + ")", native) {
  // (The special handles have the default priority, 0.)
  if (cudaStreamGetPriority(native.get(), &priority_) != cudaSuccess) {
    (void)cudaGetLastError();
    priority_ = 0;
  }
}

void CudaStream::check_submit() const {
  if (per_thread_ && std::this_thread::get_id() != thread_) {
    throw InvalidArgument(name() + " is the per-thread default stream of another thread: it can "
                          "only be used from the thread that wrapped it");
  }
  // Refused before anything touches the stream, so that another library's capture stays
  // valid (see capturing()).
  check_not_capturing();
  // The watcher must run before anything is submitted: submit() cannot start it.
  owner_.watcher().ensure_started();
}

void CudaStream::check_not_capturing() const {
  if (may_capture_.load(std::memory_order_relaxed) && !follows_native_capture()) {
    refuse_if_capturing(native_.get(), name());
  }
}

std::unique_ptr<detail::GraphRecorder> CudaStream::follow_native_capture() {
  std::unique_ptr<detail::GraphRecorder> recorder = follow_cuda_capture(device(), native_.get(), name());
  if (recorder && !owner_.started()) {
    // eventide's start-up on the device (CUPTI, its kernels' code) waits for the device to be
    // idle, which a capture forbids; a kernel loaded lazily in the capture would too. Refused
    // before anything touches the stream.
    throw StateError("the " + recorder->follows() + ", begun by other code: eventide has not "
                     "started on " + device().str() + " yet (its first use there is in this "
                     "capture, and its start-up waits for the device, which a capture forbids); "
                     "issue an eventide op on " + device().str() + " and wait for it before the "
                     "capture, as the warm-up torch.cuda.graph asks for");
  }
  return recorder;
}

Ref<Storage> CudaStream::allocate(std::size_t bytes) {
  if (follows_native_capture()) [[unlikely]] return allocate_device_settled(device(), bytes);
  return allocate_device(device(), bytes, native_.get());
}

bool CudaStream::native_idle() const noexcept {
  // A capturing stream cannot be queried (cudaStreamQuery would invalidate the capture): what
  // it holds is not known to be done.
  if (may_capture_.load(std::memory_order_relaxed) && capturing(native_.get())) return false;
  // Other code's work on the native stream (or, if the device has failed, nothing runs).
  return cudaStreamQuery(native_.get()) != cudaErrorNotReady;
}

std::exception_ptr CudaStream::device_error() const { return owner_.broken(); }

Ref<Storage> CudaStream::workspace(std::size_t bytes) {
  std::lock_guard lock(workspace_mu_);
  if (!workspace_ || workspace_->bytes() < bytes) workspace_ = allocate_device(device(), bytes, native_.get());
  return workspace_;
}

// --- The engine's native interface ------------------------------------------------------

const Dep* CudaStream::host_wait(const Work& work) noexcept {
  // Until the device has started (CudaDevice::start: CUPTI, the kernels' code), a body would
  // block in its launch behind other libraries' work; a per-thread stream cannot hold, and
  // launches at once.
  if (work.has_body() && !work.no_backend_kernels() && !per_thread_ && !owner_.started()) {
    return &owner_.started_dep();
  }
  return DeviceStream::host_wait(work);
}

bool CudaStream::can_wait_on_device(const Work& producer) noexcept {
  auto* other = dynamic_cast<CudaTimeline*>(&producer.timeline());
  // Whether this stream can wait for it on the GPU is the producer's device's strategy.
  return other && other->device().progress().can_wait_on_gpu(owner_.progress(), producer);
}

namespace {

// The CUDA event a timed marker recorded at its point in its stream (its stamp), else null.
cudaEvent_t stamp_event(const Work& work) noexcept {
  // (Set before the work is launched(), which a waiter has seen; a stamp of a CUDA timeline's
  // work is a CudaStamp.)
  const detail::Ref<detail::Stamp>& stamp = work.stamp();
  return stamp ? static_cast<const CudaStamp&>(*stamp).event() : nullptr;
}

}  // namespace

void CudaStream::wait_on_device(const Work& producer) {
  if (cudaEvent_t ev = stamp_event(producer)) {
    // A marker's own event: the wait needs no publication of its stream, and costs what
    // cudaStreamWaitEvent costs (a timed marker is what record_event() places).
    check(cudaStreamWaitEvent(handle(), ev, 0), "cudaStreamWaitEvent",
          [&] { return "(" + name() + " waiting for " + producer.describe() + ")"; });
    return;
  }
  auto& other = static_cast<CudaTimeline&>(producer.timeline());
  other.device().progress().wait_on_gpu(*this, other, producer);
}

bool CudaStream::device_wait_reads_publication(const Work& producer) noexcept {
  return stamp_event(producer) == nullptr;
}

void CudaStream::launch_body(Work& work) {
  if (work.no_backend_kernels()) {
    work.body()();  // no kernel of ours, nothing to time: also while the device starts
  } else {
    Timing::Scope timed(Timing::get(), work, native_.get());
    work.body()();
  }
}

void CudaStream::launch_marker(Work& work) {
  // In the native stream itself, after whatever any code enqueued there before it: a timed
  // CUDA event, the marker's stamp (its progress write follows).
  work.set_stamp(Timing::stamp(device().index(), native_.get()));
}

void CudaStream::end_work(Work& work) { owner_.progress().end_work(*this, work); }

bool CudaStream::can_publish_later() const noexcept {
  // Not where other code may capture the native stream (a write left for later would go into
  // their graph), nor on a per-thread default stream (another thread's write would go to its
  // own one).
  return !per_thread_ && !may_capture_.load(std::memory_order_relaxed) && owner_.progress().can_publish_later();
}

void CudaStream::publish_through(std::uint64_t seq) {
  // From the launch the device is current; from a waiter's or the watcher's thread perhaps not
  // (a write into another device's stream goes through that device's context).
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device().index()) {
    DeviceScope scope(device());
    owner_.progress().publish_through(*this, seq);
    return;
  }
  owner_.progress().publish_through(*this, seq);
}

std::exception_ptr CudaStream::unholdable(const Work& work, const Dep& dep) noexcept {
  if (!per_thread_) return nullptr;
  // Held work is launched by the watcher, whose per-thread default stream is another.
  try {
    return std::make_exception_ptr(InvalidArgument(
        work.describe() + " cannot wait for " + dep.work->describe() +
        ": work on a per-thread default stream cannot be held until host-side work "
        "finishes (eventide would launch it from its own thread, whose per-thread stream "
        "is another); use a stream of your own"));
  } catch (...) {
    return std::current_exception();  // out of memory for the message: it fails all the same
  }
}

bool CudaStream::device_writes_counter() const noexcept { return owner_.progress().gpu_writes_counter(); }

std::uint64_t CudaStream::finished_through(std::uint64_t completed, const WorkList& inflight) noexcept {
  return owner_.progress().finished_through(completed, inflight);
}

void CudaStream::reached(std::uint64_t seq) noexcept { owner_.progress().reached(timeline_, seq); }

void CudaStream::retired(Work& work) noexcept {
  // (Not get(): until the device has started, that waits for CUPTI's start, behind other
  // libraries' work, and so would every callback of work that has finished.)
  if (Timing* timing = Timing::if_started()) {
    timing->retired(work);
  } else {
    Timing::retired_untimed(work);
  }
  owner_.progress().retired(work);
}

}  // namespace eventide::backends::cuda
