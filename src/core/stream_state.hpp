// StreamState: what a Stream handle points to: a timeline and the order of what is enqueued
// on it. Backends subclass it to run the work (a worker thread, a cudaStream_t).
//
// Enqueueing an op (launch) happens under `submit_mu_`: the op gets the next sequence
// number, registers its tensor hazards and collects its dependencies, and is handed to the
// backend, in one step, so that the order of sequence numbers is the order of execution.
// The backend must then finish every Work it was given, in order, each exactly once: run it
// after its deps, or fail it; that is what makes every fence pass and nothing hang.
//
// A wait (barrier) is a Work too, without a body: it finishes when the fences it waits for
// have passed, failing if one of them failed. The latest barrier is the stream's *gate*:
// every later op depends on it, so a failed wait fails all later work (the stream is broken).
//
// A marker (mark(): what record(stream) ties an event to) is a Work without a body at the
// end of the stream: it finishes when the device reaches it, after everything enqueued before
// it, and its time is when it was reached. It depends on the gate like an op (a marker on a
// broken stream fails), and it fails if the work right before it failed, so that an event
// recorded after a failed op reports the failure. On a GPU the backend puts it into the native stream itself, so that
// it also follows the work other code (PyTorch, the user's kernels) enqueued there.
//
// Thread-safety: all members, from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "core/graph_recorder.hpp"
#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/ref.hpp"
#include "core/timeline.hpp"
#include "core/wait.hpp"
#include "core/work.hpp"
#include "eventide/detail/callback.hpp"
#include "eventide/device.hpp"

namespace eventide::detail {

class CaptureState;
class EventState;
class Storage;
class TensorState;

// What an op may ask of its launch beyond its tensors (collectives: src/distributed).
struct LaunchOptions {
  // Ordered after this work too, which may be on another stream; its failure does not
  // propagate (DepKind::order): a communicator's previous collective, so that every rank
  // issues them in one order.
  Ref<Work> after;
  // Ordered after each of these too, in the same way (Event::native_handle: a record after an
  // event's pending work, whose failure is the event's, not the record's).
  std::span<const Ref<Work>> also_after;
  // The body runs even if a dependency failed (Work::must_issue).
  bool must_issue = false;
  // The body launches no kernel and needs no timing (Work::no_backend_kernels).
  bool no_backend_kernels = false;
  // The op overwrites its `writes` whole and never reads them: their earlier writer orders it,
  // but that writer's failure does not become the op's (a collective into a caller's out,
  // reused after one that failed).
  bool overwrites = false;
  // Memory the body uses besides its tensors' (a GPU upload's pinned staging, a matmul's
  // workspace), kept like theirs until the op has run.
  Ref<Storage> keep;
  // The work keeps its parts' times for the profiler (Work::keeps_parts: a graph replay's).
  bool keeps_parts = false;
  // The stream's capture_epoch() when the body was made, if the body is bound to it (0: not):
  // a capture that began or ended since makes the launch a StateError, nothing run.
  std::uint64_t capture_epoch = 0;
};

class StreamState : public std::enable_shared_from_this<StreamState> {
 public:
  // `timeline` is the backend's (a GPU-written one); null: a timeline the host advances.
  StreamState(Device device, std::uint64_t id, Ref<Timeline> timeline = nullptr);
  virtual ~StreamState();
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  Device device() const noexcept { return device_; }
  std::uint64_t id() const noexcept { return id_; }
  // "cpu stream 3".
  const std::string& name() const noexcept { return timeline_->name(); }
  Timeline& timeline() const noexcept { return *timeline_; }

  // Enqueues an op that reads `reads` and writes `writes` and runs `body` on the backend.
  // The hazards order it after every op it conflicts with, on any stream, and an op with a
  // body keeps the storage of each of those tensors (and options.keep) until it has run: the
  // body may use their memory by address alone. Returns its Work. Throws only before anything is
  // enqueued (StateError after shutdown).
  Ref<Work> launch(std::string name, std::span<TensorState* const> reads,
                   std::span<TensorState* const> writes, Callback body,
                   const LaunchOptions& options = {});
  Ref<Work> launch(std::string name, std::initializer_list<TensorState*> reads,
                   std::initializer_list<TensorState*> writes, Callback body,
                   const LaunchOptions& options = {}) {
    return launch(std::move(name), std::span<TensorState* const>(reads.begin(), reads.size()),
                  std::span<TensorState* const>(writes.begin(), writes.size()), std::move(body),
                  options);
  }

  // Enqueues a wait on `event` (snapshot of its tied work now). StateError if it is empty.
  // Nothing is enqueued when the event has finished without error.
  void wait(EventState& event);

  // Enqueues a marker at the current end of the stream and returns it (see above); an
  // untimed one takes no device time (for an event with timing disabled, or a sync point).
  // Throws only before anything is enqueued.
  enum class MarkerTiming { timed, untimed };
  Ref<Work> mark(MarkerTiming timing = MarkerTiming::timed);
  // mark() for `event`'s record (Event::record(stream)): on a capturing stream, the event is
  // the capture's (recorded again at each replay) and is tied to the capture's Work.
  Ref<Work> mark_for(const std::shared_ptr<EventState>& event, MarkerTiming timing);
  // All work enqueued so far has finished (on a GPU, the native stream's other work too).
  bool query() const;
  // The sequence number on this stream's timeline up to which everything enqueued so far
  // will have finished: the last Work's, or, on a stream with a native one, a marker's
  // placed now (it covers the other code's work there too).
  std::uint64_t sync_point();
  // The error of a failed wait (the stream is broken), else null.
  std::exception_ptr error() const;
  // A failure of the whole device (a GPU's sticky error), else null: synchronize raises it.
  virtual std::exception_ptr device_error() const { return nullptr; }
  // The native stream (cudaStream_t), null where there is none. A stream that has one may
  // carry work other code enqueued there, which only a marker covers.
  virtual void* native_handle() const noexcept { return nullptr; }
  // The native stream has been handed out (Stream::native_handle): code other than
  // eventide's may now use it, and begin a capture on it.
  virtual void mark_exposed() noexcept {}
  // The stream's priority (lower numbers are more urgent; DeviceBackend::stream_priority_range):
  // the one it was made with, or a wrapped native stream's own.
  virtual int priority() const noexcept { return 0; }
  // Whether every Work enqueued so far has finished (the native stream's other work aside).
  bool own_work_done() const;

  // --- Graph capture (core/capture.hpp) ---
  // Whether the stream captures (a hint without a lock: capture() decides).
  bool in_capture() const noexcept { return capturing_.load(std::memory_order_acquire); }
  // The capture this stream's work goes to, else null.
  std::shared_ptr<CaptureState> capture() const;
  // While the stream captures on a device that records into a native graph: the native
  // stream that its ops' bodies launch on, and that native_handle() hands out (a backend's
  // answer for its own); else null.
  void* capture_native() const noexcept { return capture_native_.load(std::memory_order_acquire); }
  // Moves on each time the stream begins or stops capturing, under its submit lock: a body
  // made for one capture (its native stream) is never launched in another, or eagerly after
  // it (LaunchOptions::capture_epoch). Read it before capture_native().
  std::uint64_t capture_epoch() const noexcept { return capture_epoch_.load(std::memory_order_acquire); }
  // Makes the stream's work go to `capture` (CaptureState::begin and join call it).
  // InvalidArgument where the device cannot capture; StateError if the stream captures already.
  void begin_capture(std::shared_ptr<CaptureState> capture);
  // The stream stops capturing for `capture` (if it still is); returns its last Work.
  Ref<Work> end_capture(const CaptureState& capture) noexcept;
  // Where other code may capture the native stream (torch.cuda.graph on a wrapped stream):
  // a followed capture that is over ends (CaptureState::end_followed), and with `join` a
  // capture that other code has begun there is followed (CaptureState::follow), so that an
  // op issued now goes into that code's graph. Before an op (join), a marker or a wait.
  void sync_native_capture(bool join);
  // The StateError of a launch whose body was made before the stream's capture began or ended.
  [[noreturn]] void throw_capture_moved(const std::string& op) const;
  // If the stream captures: abandons the capture and throws, `call` being what cannot be
  // captured ("synchronize"); with owner_only, only on the thread that began the capture.
  enum class CaptureCaller { any_thread, owner_only };
  void refuse_in_capture(const std::string& call, CaptureCaller who = CaptureCaller::any_thread) const;
  // How many Works have been enqueued here so far (ops, markers, waits).
  std::uint64_t enqueued() const;
  // Whether work enqueued here may be launched by another thread than the caller's (a held
  // GPU op, by the watcher): false for a per-thread default stream, which is another stream
  // on each thread.
  virtual bool launches_from_any_thread() const noexcept { return true; }

 protected:
  // Whether the native stream has no work of its own left (other code's included); streams
  // without one have nothing but eventide's work.
  virtual bool native_idle() const noexcept { return true; }
  // Whether other code may capture the native stream: only then does sync_native_capture ask
  // follow_native_capture, and only a stream that may be captured is followed.
  virtual bool may_be_captured() const noexcept { return false; }
  // A recorder that follows the capture other code has begun on the native stream, if it has
  // (core/graph_recorder.hpp), else null.
  virtual std::unique_ptr<GraphRecorder> follow_native_capture() { return nullptr; }
  // Throws (InvalidArgument) if work may not be enqueued on this stream from the calling
  // thread; called before anything is enqueued.
  virtual void check_submit() const {}
  // Takes `work` (sequence number, deps and body set; or an error already set, then it must
  // only be failed in order) and arranges for it to run. Called under submit_mu_.
  virtual void submit(Ref<Work> work) noexcept = 0;

 private:
  // The gate a Work enqueued now depends on (dropping one that passed without error), or
  // null. Under submit_mu_.
  const Ref<Work>& current_gate() noexcept;
  // Makes `work` (numbered, deps collected) the last Work and hands it to the backend.
  // Under submit_mu_.
  void submit_locked(Ref<Work> work) noexcept;
  // Whose a marker is: the user's (an event's record: observers see it) or the runtime's own
  // (synchronize's: no work of the user's, observers do not see it).
  enum class MarkerOwner { user, runtime };
  // mark(), with the marker's kind and owner.
  Ref<Work> enqueue_marker(WorkKind kind, MarkerOwner owner);
  // wait() of an event on a capturing stream, or of an event recorded in a capture: true when
  // the capture took it (or refused it, throwing).
  bool wait_in_capture(EventState& event, std::span<const Ref<Work>> pending, bool failed);

  const Device device_;
  const std::uint64_t id_;
  const Ref<Timeline> timeline_;
  mutable RuntimeMutex submit_mu_;
  std::uint64_t enqueued_ = 0;
  Ref<Work> last_;  // the last Work enqueued
  Ref<Work> gate_;
  std::shared_ptr<CaptureState> capture_;  // under submit_mu_
  std::atomic<bool> capturing_{false};
  std::atomic<void*> capture_native_{nullptr};
  std::atomic<std::uint64_t> capture_epoch_{1};
  std::mutex follow_mu_;  // orders sync_native_capture's follow between threads
};

// "cpu stream 3".
std::string stream_name(Device device, std::uint64_t id);

// The first dependency of `work` whose fence has not passed, else null. (Those on the work's
// own timeline have: a stream runs its work in order.)
const Dep* first_pending_dep(const Work& work) noexcept;

// Runs a Work the way every host-executed backend does, once its dependencies have passed (or
// `stop` is true): fails it if one of them failed or `stop` is true ("the runtime shut
// down"), else runs its body with timing; then releases its execution state and advances its
// timeline.
void run_work(Work& work, const std::atomic<bool>& stop) noexcept;

}  // namespace eventide::detail
