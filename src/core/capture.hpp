// Graph capture and replay (eventide/graph.hpp): the capture of a stream's work into a graph,
// and the graph that replays it.
//
// Capture. While a stream captures, StreamState hands what is issued on it to its
// CaptureState instead of its backend: an op becomes a node (its name and the memory it uses)
// whose body goes to the device's GraphRecorder (core/graph_recorder.hpp: kept to run again on
// the CPU, recorded into a CUDA graph on a GPU), an event recorded there cuts the recording
// into stretches and becomes a point between them, and nothing runs. Streams
// join a capture by waiting on an event recorded in it (and are joined back by the capture's
// stream waiting on an event recorded on them); their work is the graph's too, in the order it
// was issued, which is an order its dependencies allow.
//
// Every capture has a *capture Work*, on a timeline of its own, that stands for all it
// captured: it produces the tensors made in the capture (the graph's own), and the events
// recorded in it are tied to it. It never runs. It finishes when the capture does: failed
// with "replay the graph first" when the capture ends (what it stands for has no value until
// a replay), or with the reason when the capture is abandoned. So whoever looks for captured
// work learns at once that it is not there, and nothing waits on it for ever:
// - a host wait on it, or a poll, demands it (Timeline::demand): that abandons the capture
//   (nothing may wait for work that has not run), with a refusal naming the capture;
// - an eager op on another stream that reads a tensor of the capture depends on the capture
//   Work, and fails with its error when the capture ends.
// Calls that cannot be captured (a UserEvent gate: a wait for the host; synchronize, a
// collective, a copy between devices) abandon the capture and throw; later calls on its
// streams throw the same reason until the capture is ended. Random numbers are captured with
// a cell that each replay writes first (GraphDraws).
//
// Replay. A graph replays on a stream as one op per stretch between the events it holds,
// whose body is the stretch's (the nodes' bodies in order on the CPU, one launch of a native
// graph on a GPU), without the per-op launch work, and a marker for those events (each one recorded again at its point of every replay). The first
// and the last of those ops take the graph's tensors as theirs, so the hazards order the
// replay like any op: after the writers of what it reads, after the readers of what it
// writes (the previous replay's readers of the graph's memory too), and the graph's outputs
// are produced by it. The graph keeps every tensor it touches, with its memory kept out of
// stream-ordered reuse (Storage::mark_escaped): a replay may use it at any time.
//
// Following other code's capture. An op issued on a stream whose native stream other code
// captures (torch.cuda.graph on torch's stream, wrapped with ev.stream) is captured into that
// code's graph: the stream follows that capture with a CaptureState of its own (follow()),
// whose recorder runs the bodies on the native stream. That code ends the capture and
// replays the graph, which eventide does not see, so:
// - the graph keeps what the ops use (their tensors, workspaces, staging) until it and its
//   instances are gone (GraphRecorder::keep_with_graph: the CaptureState itself, released on
//   a dispatcher thread);
// - an op may use only tensors with no unfinished or failed work of eventide's besides the
//   capture's (a graph cannot wait for eventide's work at each replay); an event record,
//   random numbers, a stream wait for eventide work and what an eventide capture refuses are
//   refused, and abandon what eventide captured (that code's capture stays valid: nothing was
//   done to its stream);
// - the capture's end is seen late: at the stream's next op, marker or wait, at a host wait
//   on captured work, at a poll of it (posted to the device's dispatcher) or when the graph
//   is gone. The capture Work then finishes without error (what it stood for, the capture, is
//   over; the replays are the other code's work, which its own events and synchronize cover).
//   The memory the graph writes is marked Storage::in_other_graph as it is captured, so that
//   reading it on the host waits for all work on the device first, the latest replay's included.
//
// Thread-safety: CaptureState's members take its own lock, a leaf but for what a stream calls
// under its submit lock (stream lock before capture lock). What goes to the recorder (a body,
// a cut) is ordered by the capture's recording lock, taken first and under no runtime lock,
// and held while a GPU recorder runs a body: a body may issue more work into the capture (the
// lock is recursive), and another thread's op waits for it. GraphState is immutable once
// made; replay() from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/graph_recorder.hpp"
#include "core/ref.hpp"
#include "core/runtime_lock.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"

namespace eventide::detail {

class EventState;
class StreamState;
class TensorState;
struct LaunchOptions;
class CaptureState;

// One captured op (its body is the recorder's).
struct GraphNode {
  std::string name;
  Ref<Storage> keep;  // memory its body uses besides its tensors' (a workspace)
};

// Random numbers drawn in a capture (rand, randn): each replay draws afresh from the device's
// generator, the numbers the ops would draw if they were issued then. The capture counts the
// ops' Philox blocks (each op's offset from the replay's base); a replay reserves that many
// and, first in stream order, writes its seed and base into `cell`, which the ops' bodies
// read when they run.
struct GraphDraws {
  std::shared_ptr<TensorState> cell;  // two 64-bit words on the device: seed, base
  // The body that writes them into the cell on `stream` in stream order, and the memory it
  // uses until it has run (the ops layer's: a device's upload).
  std::function<std::pair<Callback, Ref<Storage>>(StreamState& stream, std::uint64_t seed, std::uint64_t base)>
      write;
  std::uint64_t blocks = 0;  // drawn at each replay
};

// An event recorded in the capture: recorded again at each replay, after `position` stretches.
struct GraphPoint {
  std::size_t position = 0;
  std::shared_ptr<EventState> event;
};

class GraphState : public std::enable_shared_from_this<GraphState> {
 public:
  Device device() const noexcept { return device_; }
  std::uint64_t id() const noexcept { return id_; }
  std::size_t ops() const noexcept { return nodes_.size(); }
  // "graph 3 (12 ops, captured on cpu stream 1)".
  std::string str() const;
  // Replays the graph on `stream` (of the graph's device); returns the replay's work, which
  // the caller ties an event to. InvalidArgument for a stream of another device.
  std::vector<Ref<Work>> replay(StreamState& stream);

 private:
  friend class CaptureState;
  GraphState() = default;

  Device device_ = Device::cpu();
  std::uint64_t id_ = 0;
  std::string captured_on_;
  std::vector<GraphNode> nodes_;
  std::vector<std::unique_ptr<GraphStretch>> stretches_;
  std::vector<GraphPoint> points_;  // by position
  GraphDraws draws_;
  // Orders whole replays: each issues all its ops before another replay issues one, so that
  // two threads' replays never interleave their stretches (the second's first stretch would
  // rewrite the graph's memory, its random numbers' cell among it, before the first's later
  // stretches read it). Not a runtime lock: held while the ops are issued, never while one runs.
  std::mutex replay_mu_;
  // The tensors it reads from outside, those it writes (outside and its own), and its own.
  std::vector<std::shared_ptr<TensorState>> reads_;
  std::vector<std::shared_ptr<TensorState>> writes_;
  // The last work of the capture's streams when it ended: the graph's memory may have been
  // memory that work still used (stream-ordered reuse), so the first replay comes after it.
  std::vector<Ref<Work>> after_;
};

// The capture timeline: a timeline of one Work, whose demand abandons its capture.
class CaptureTimeline;

class CaptureState : public std::enable_shared_from_this<CaptureState> {
 public:
  // Begins a capture on `origin`. InvalidArgument where its device cannot capture, StateError
  // if it captures already.
  static std::shared_ptr<CaptureState> begin(const std::shared_ptr<StreamState>& origin);
  // Makes `stream` follow other code's capture of its native stream (see the header comment),
  // which `recorder` follows. Throws what handing the capture to that graph throws.
  static std::shared_ptr<CaptureState> follow(const std::shared_ptr<StreamState>& stream,
                                              std::unique_ptr<GraphRecorder> recorder);
  ~CaptureState();

  // Whether this capture follows other code's (follow()).
  bool follows_other_code() const noexcept { return followed_ != nullptr; }
  // For one that does: whether that capture is still open. From any thread, under any lock.
  bool other_capture_open() const noexcept { return !followed_ || followed_->still_open(); }
  // For one that does: that capture is over. The streams stop following it and the capture
  // Work finishes (see the header comment); idempotent. Under no lock.
  void end_followed() noexcept;

  Device device() const noexcept { return device_; }
  std::uint64_t id() const noexcept { return id_; }
  // "the capture of graph 3 on cpu stream 1".
  const std::string& str() const noexcept { return name_; }
  // The Work that stands for all the capture holds (see the header comment).
  const Ref<Work>& work() const noexcept { return work_; }
  // The capture whose capture Work `work` is, while it lives; null for any other work.
  static std::shared_ptr<CaptureState> of(const Work& work) noexcept;
  // What `event`, recorded on a tensor that `producer` produced, is tied to: `producer`, but
  // for a tensor of a capture still open, whose event is the capture's (recorded again at
  // this point of each replay).
  static Ref<Work> record_of(Ref<Work> producer, const std::shared_ptr<EventState>& event, Device device);
  // Whether the calling thread began this capture (a synchronize there is a mistake to refuse;
  // on another thread it waits for what the capture's streams ran before it).
  bool began_on_this_thread() const noexcept { return owner_ == std::this_thread::get_id(); }
  // Whether any capture is open in the process (a hint, for paths that look only then).
  static bool any_open() noexcept;
  // The native stream the capture's streams hand out for theirs (GraphRecorder), else null.
  void* native_stream() const noexcept { return native_; }

  // --- From a capturing stream (under none of its locks). Each throws the capture's abandonment
  // once it has been abandoned, and abandons it (then throws) on what cannot be captured. ---
  // An op: returns the capture Work.
  Ref<Work> add_op(StreamState& stream, std::string name, std::span<TensorState* const> reads,
                   std::span<TensorState* const> writes, Callback body, const LaunchOptions& options);
  // An event recorded on `stream` (null: on a tensor of the capture, at this point): returns
  // the capture Work, which the event is tied to.
  Ref<Work> add_event(StreamState* stream, const std::shared_ptr<EventState>& event);
  // `stream` waits for `pending` (an event's unfinished work; `event` the event): allowed for
  // this capture's own work; joins the streams back.
  void add_wait(StreamState& stream, const EventState& event, std::span<const Ref<Work>> pending);
  // A tensor made by an op on a capturing stream: the graph's own.
  void adopt(TensorState& tensor);
  // Throws the abandonment if the capture was abandoned (or abandons it, then throws, if
  // captured work was polled since the last call).
  void check_open();

  // A random op's draw of `blocks` in the capture: the graph's cell (GraphDraws) and the op's
  // offset from each replay's base. `make` gives the cell and its writer at the first draw
  // (called with no lock held). Throws the abandonment, as add_op does.
  std::pair<std::shared_ptr<TensorState>, std::uint64_t> draw(std::uint64_t blocks,
                                                              const std::function<GraphDraws()>& make);
  // Scratch memory of at least `bytes` that every op of the capture may use (a matmul's
  // workspace), made by `make(bytes)`, with no lock held, the first time or when a larger one
  // is asked for; kept by each op that uses it, as GraphNode::keep. Only for a device whose
  // graphs run their ops one after another, and their replays one after another (a GPU's:
  // one chain per graph, replays ordered by the graph's writes): one block then serves them all.
  // Null once the capture is no longer open (the caller uses its own).
  Ref<Storage> shared_scratch(std::size_t bytes, const std::function<Ref<Storage>(std::size_t)>& make);

  // `stream` joins the capture (it waits on an event recorded in it); false if it may not
  // (another device: the caller refuses the wait).
  bool join(const std::shared_ptr<StreamState>& stream);
  // Abandons the capture for `reason` (a refusal: an InvalidArgument or StateError naming the
  // call); returns the error the capture now fails with. Idempotent: the first reason stays.
  std::exception_ptr abandon(std::exception_ptr reason) noexcept;
  // abandon(StateError(str() + ": " + what)), thrown.
  [[noreturn]] void refuse(const std::string& what);

  // Ends the capture: the streams stop capturing, and the graph is made, or the abandonment
  // (or a stream not joined back) thrown. Once.
  std::shared_ptr<GraphState> end();
  // Ends it abandoned (a capture scope left by an exception, or destroyed without end()).
  void discard() noexcept;

 private:
  CaptureState(const std::shared_ptr<StreamState>& origin, std::string name);
  // Makes the capture Work and its timeline, and counts the capture as open.
  void start(std::shared_ptr<GraphRecorder> followed);
  // Refuses `what` in a capture that follows other code's (see the header comment).
  [[noreturn]] void refuse_followed(const std::string& what);
  // Throws what a call on a capture that is no longer open gets: the abandonment, or that it
  // has ended. Under mu_.
  [[noreturn]] void throw_closed_locked() const;
  // The recorder, while the capture is open (else throws as throw_closed_locked). Under
  // record_mu_.
  GraphRecorder& recorder_while_open();
  // Detaches every stream of the capture; under no lock.
  void detach_streams() noexcept;
  // Finishes the capture Work with `error` (advances its timeline); under no lock.
  void finish_work(std::exception_ptr error) noexcept;
  // Lets the recorder go (a GPU's ends its native capture); under no lock.
  void close_recorder() noexcept;
  std::size_t find_tensor(const std::vector<std::shared_ptr<TensorState>>& in, const TensorState& t) const;

  const Device device_;
  const std::uint64_t id_;
  const std::thread::id owner_ = std::this_thread::get_id();
  const std::string name_;
  Ref<CaptureTimeline> timeline_;
  Ref<Work> work_;
  // The device's recorder; its calls and what they give are ordered by record_mu_ (see the
  // header comment), then kept under mu_.
  std::recursive_mutex record_mu_;
  std::unique_ptr<GraphRecorder> recorder_;
  void* native_ = nullptr;  // recorder_->native_stream()
  // The recorder of a capture that follows other code's (else null): shared with the capture
  // timeline, whose poll asks it, and kept while either lives.
  std::shared_ptr<GraphRecorder> followed_;

  mutable RuntimeMutex mu_;
  // open -> abandoned (a refusal) -> ending (end() or discard() under way) -> ended.
  enum class Phase { open, abandoned, ending, ended } phase_ = Phase::open;
  std::exception_ptr abandoned_;
  std::vector<std::weak_ptr<StreamState>> streams_;  // streams_[0]: the origin
  // Per stream (same index): nodes captured on it, the last one's position, and the position
  // up to which the origin waited for it (joined back).
  struct Joined {
    std::size_t last_op = 0;     // 1 + index of its last node; 0: none
    std::size_t joined_back = 0;
  };
  std::vector<Joined> joined_;
  std::shared_ptr<GraphState> graph_;  // what is being built
  std::vector<std::shared_ptr<TensorState>> own_;  // tensors made in the capture
  // Events recorded in the capture: their stream's index and position, for joins.
  struct Recorded {
    const EventState* event;
    std::size_t stream;
    std::size_t position;
  };
  std::vector<Recorded> recorded_;
  std::mutex scratch_mu_;  // a leaf: guards scratch_ only
  Ref<Storage> scratch_;
};

}  // namespace eventide::detail
