// Graph capture and replay: see core/capture.hpp.
#include "core/capture.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/event_state.hpp"
#include "core/observer.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::detail {

std::exception_ptr looked_at_error(const CaptureState& c) noexcept;

namespace {

std::atomic<std::uint64_t> next_graph_id{0};
std::atomic<int> open_captures{0};  // CaptureStates alive

// The counter of a capture timeline, made before the Timeline that points to it.
struct CaptureCounter {
  std::atomic<std::uint64_t> value{0};
};

}  // namespace

// Device-written in the Timeline's sense (its counter is its own, advanced by the capture),
// so that whoever looks for its Work says so (demand): that is the refusal.
class CaptureTimeline final : private CaptureCounter, public Timeline {
 public:
  CaptureTimeline(std::string name, std::weak_ptr<CaptureState> capture)
      : Timeline(std::move(name), &value), capture_(std::move(capture)) {}
  std::shared_ptr<CaptureState> capture() const noexcept { return capture_.lock(); }
  // Captured work was polled: the capture's next call abandons it (CaptureState::check_open).
  bool looked() const noexcept { return looked_.load(std::memory_order_acquire); }

 protected:
  void demanded(std::uint64_t seq, Demand how) noexcept override {
    (void)seq;
    if (how == Demand::soon) {
      // A poll: from under any lock (an event's), so only noted, touching nothing but this
      // flag (not even a reference to the capture, whose last one must not go here).
      looked_.store(true, std::memory_order_release);
      return;
    }
    // A host wait: no lock held; the capture is abandoned at once and the wait returns.
    if (std::shared_ptr<CaptureState> c = capture_.lock()) (void)c->abandon(looked_at_error(*c));
  }

 private:
  std::weak_ptr<CaptureState> capture_;
  std::atomic<bool> looked_{false};
};

std::exception_ptr looked_at_error(const CaptureState& c) noexcept {
  try {
    return std::make_exception_ptr(StateError(
        c.str() + ": a host wait or a poll of captured work (wait, synchronize, poll, query, "
        "reading a tensor's values) cannot be captured: nothing in a capture runs until the "
        "graph is replayed; wait or poll after the capture, on what a replay returns"));
  } catch (...) {
    return out_of_memory_error();
  }
}

std::shared_ptr<CaptureState> CaptureState::of(const Work& work) noexcept {
  if (!work.timeline().device_written()) return nullptr;  // the host's own timelines: not one
  auto* t = dynamic_cast<const CaptureTimeline*>(&work.timeline());
  return t ? t->capture() : nullptr;
}

bool CaptureState::any_open() noexcept { return open_captures.load(std::memory_order_acquire) > 0; }

Ref<Work> CaptureState::record_of(Ref<Work> producer, const std::shared_ptr<EventState>& event, Device device) {
  if (!any_open()) [[likely]] return producer;
  // Recorded in a capture's scope (its stream current): at this point of each replay, also
  // for a tensor from outside that the capture writes (its producer is still the eager one).
  std::shared_ptr<StreamState> current = Runtime::get().current_stream(device);
  if (std::shared_ptr<CaptureState> c = current->capture()) return c->add_event(current.get(), event);
  // A tensor of a capture still open, recorded elsewhere: at the capture's current end.
  if (std::shared_ptr<CaptureState> c = of(*producer)) return c->add_event(nullptr, event);
  return producer;
}

CaptureState::CaptureState(const std::shared_ptr<StreamState>& origin)
    : device_(origin->device()),
      id_(++next_graph_id),
      name_("the capture of graph " + std::to_string(id_) + " on " + origin->name()),
      graph_(new GraphState()) {
  streams_.push_back(origin);
  joined_.push_back(Joined{});
  graph_->device_ = device_;
  graph_->id_ = id_;
  graph_->captured_on_ = origin->name();
}

std::shared_ptr<CaptureState> CaptureState::begin(const std::shared_ptr<StreamState>& origin) {
  DeviceBackend& backend = Runtime::get().context(origin->device()).backend();
  const std::string why = backend.why_no_capture();
  if (!why.empty()) throw InvalidArgument("graph capture on " + origin->name() + ": " + why);
  std::shared_ptr<CaptureState> c(new CaptureState(origin));
  c->recorder_ = backend.record_graph("graph " + std::to_string(c->id_) + ", captured on " + origin->name());
  c->native_ = c->recorder_->native_stream();
  open_captures.fetch_add(1, std::memory_order_acq_rel);
  c->timeline_ = make_ref<CaptureTimeline>("graph " + std::to_string(c->id_) + " (capture)", c);
  c->work_ = make_ref<Work>(c->timeline_, "graph " + std::to_string(c->id_) + " (captured work)", WorkKind::op);
  c->work_->set_seq(1);
  origin->begin_capture(c);  // throws if the stream captures already: nothing else holds c
  return c;
}

CaptureState::~CaptureState() {
  open_captures.fetch_sub(1, std::memory_order_acq_rel);
  // A capture Work is always finished: a Work nobody finishes would hang its waiters.
  if (work_ && !work_->done()) finish_work(abandoned_ ? abandoned_ : out_of_memory_error());
}

std::size_t CaptureState::find_tensor(const std::vector<std::shared_ptr<TensorState>>& in,
                                      const TensorState& t) const {
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i].get() == &t) return i;
  }
  return in.size();
}

void CaptureState::throw_closed_locked() const {
  if (abandoned_) std::rethrow_exception(abandoned_);
  throw StateError(name_ + " has ended: work issued on its streams runs as usual again, and a "
                   "new Capture records anew");
}

GraphRecorder& CaptureState::recorder_while_open() {
  // A call that passed check_open() may have waited here for an end(): once the capture is
  // no longer open its recorder has made its last cut, or is gone.
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
  return *recorder_;
}

void CaptureState::check_open() {
  if (timeline_->looked()) (void)abandon(looked_at_error(*this));
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
}

std::exception_ptr CaptureState::abandon(std::exception_ptr reason) noexcept {
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::open) return abandoned_ ? abandoned_ : reason;
    phase_ = Phase::abandoned;
    abandoned_ = std::move(reason);
  }
  finish_work(abandoned_);  // outside the lock: listeners fire inline
  return abandoned_;
}

void CaptureState::refuse(const std::string& what) {
  std::rethrow_exception(abandon(std::make_exception_ptr(StateError(name_ + ": " + what))));
}

void CaptureState::finish_work(std::exception_ptr error) noexcept {
  if (!work_ || work_->done()) return;
  work_->set_error(std::move(error));
  work_->timeline().advance(1);
}

void CaptureState::adopt(TensorState& tensor) {
  std::shared_ptr<TensorState> t = tensor.shared_from_this();
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) return;  // the op that made it will throw the abandonment
  tensor.storage->mark_escaped();  // the graph's own memory: never reused in stream order
  Work::Deps none;
  tensor.use_for_write(work_, none);  // produced by the capture: no value until a replay
  own_.push_back(std::move(t));
}

Ref<Work> CaptureState::add_op(StreamState& stream, std::string name, std::span<TensorState* const> reads,
                               std::span<TensorState* const> writes, Callback body,
                               const LaunchOptions& options) {
  check_open();
  if (options.after || !options.also_after.empty() || options.must_issue) {
    refuse(name + " cannot be captured: it is ordered by work outside the capture (a collective, "
                  "or the record of a native event); issue it outside the capture");
  }
  // In the recording's order (see the header comment); the body goes to the recorder under
  // no runtime lock (a user's callable: released, or run into a GPU's graph, there).
  std::lock_guard order(record_mu_);
  GraphRecorder& recorder = recorder_while_open();
  try {
    recorder.add(name, std::move(body));
  } catch (...) {
    std::rethrow_exception(abandon(std::current_exception()));
  }
  if (options.keep) options.keep->mark_escaped();  // the graph's, used at any replay
  GraphNode node{std::move(name), options.keep};
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
  // Everything the node touches is the graph's to keep, its memory out of stream-ordered reuse.
  auto keep = [&](TensorState* t, std::vector<std::shared_ptr<TensorState>>& into) {
    t->storage->mark_escaped();
    if (find_tensor(into, *t) == into.size()) into.push_back(t->shared_from_this());
  };
  for (TensorState* t : reads) {
    if (find_tensor(own_, *t) == own_.size()) keep(t, graph_->reads_);
  }
  for (TensorState* t : writes) {
    // A write of a tensor from outside reads it too, in the replay's hazards: its producer's
    // failure is the replay's (only the graph's own tensors are overwritten whole).
    if (find_tensor(own_, *t) == own_.size()) keep(t, graph_->reads_);
    keep(t, graph_->writes_);
  }
  std::size_t index = 0;
  while (index < streams_.size() && streams_[index].lock().get() != &stream) ++index;
  if (index == streams_.size()) throw_closed_locked();  // (the stream was detached)
  graph_->nodes_.push_back(std::move(node));
  joined_[index].last_op = graph_->nodes_.size();
  return work_;
}

Ref<Work> CaptureState::add_event(StreamState* stream, const std::shared_ptr<EventState>& event) {
  check_open();
  // The recording is cut here: the event is recorded again between the stretches.
  std::lock_guard order(record_mu_);
  GraphRecorder& recorder = recorder_while_open();
  std::unique_ptr<GraphStretch> stretch;
  try {
    stretch = recorder.cut(false);
  } catch (...) {
    std::rethrow_exception(abandon(std::current_exception()));
  }
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
  if (stretch) graph_->stretches_.push_back(std::move(stretch));
  std::size_t index = 0;
  while (stream && index < streams_.size() && streams_[index].lock().get() != stream) ++index;
  const std::size_t at = graph_->nodes_.size();
  // Kept in position order; an event recorded twice is recorded again at each point.
  graph_->points_.push_back(GraphPoint{graph_->stretches_.size(), event});
  recorded_.push_back(Recorded{event.get(), index, at});
  return work_;
}

void CaptureState::add_wait(StreamState& stream, const EventState& event, std::span<const Ref<Work>> pending) {
  check_open();
  for (const Ref<Work>& w : pending) {
    if (w != work_ && w->kind() == WorkKind::host) {
      refuse(stream.name() + " waits for " + w->describe() +
             ", a step the host takes (a UserEvent not yet set): a graph cannot wait for the "
             "host at each replay; wait for it before the capture begins, or gate the replay's "
             "stream instead");
    }
  }
  std::lock_guard lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
  // Device work from outside, still running (an op issued before, a stream's marker: a
  // wait_stream): every replay comes after it, as the captured work came after it here.
  for (const Ref<Work>& w : pending) {
    if (w != work_) graph_->after_.push_back(w);
  }
  std::size_t index = 0;
  while (index < streams_.size() && streams_[index].lock().get() != &stream) ++index;
  if (index != 0) return;  // a joined stream waits (its own order is the issue order)
  // The origin waits for an event recorded on a joined stream: joined back up to there.
  for (auto it = recorded_.rbegin(); it != recorded_.rend(); ++it) {
    if (it->event == &event) {
      if (it->stream < joined_.size()) {
        joined_[it->stream].joined_back = std::max(joined_[it->stream].joined_back, it->position);
      }
      break;
    }
  }
}

bool CaptureState::join(const std::shared_ptr<StreamState>& stream) {
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::open) throw_closed_locked();
    if (stream->device() != device_) return false;
    streams_.push_back(stream);
    joined_.push_back(Joined{});
  }
  stream->begin_capture(shared_from_this());
  // An end() that began meanwhile may have detached the streams before this one was attached:
  // then it is detached here, and the wait that joined is refused.
  bool late;
  {
    std::lock_guard lock(mu_);
    late = phase_ != Phase::open;
  }
  if (late) {
    (void)stream->end_capture(*this);
    std::lock_guard lock(mu_);
    throw_closed_locked();
  }
  return true;
}

void CaptureState::detach_streams() noexcept {
  std::vector<std::weak_ptr<StreamState>> streams;
  {
    std::lock_guard lock(mu_);
    streams = streams_;
  }
  for (const auto& w : streams) {
    if (std::shared_ptr<StreamState> s = w.lock()) {
      Ref<Work> last = s->end_capture(*this);
      std::lock_guard lock(mu_);
      if (last && !last->done()) graph_->after_.push_back(std::move(last));
    }
  }
}

std::shared_ptr<GraphState> CaptureState::end() {
  if (timeline_->looked()) (void)abandon(looked_at_error(*this));
  Phase was;
  {
    std::lock_guard lock(mu_);
    was = phase_;
    if (was == Phase::ending || was == Phase::ended) throw StateError(name_ + " has ended already");
    phase_ = Phase::ending;  // joins and captured calls are refused from here on
  }
  detach_streams();
  std::shared_ptr<GraphState> graph;
  std::exception_ptr error;  // why there is no graph
  {
    std::lock_guard lock(mu_);
    if (was == Phase::abandoned) error = abandoned_;
    for (std::size_t i = 1; !error && i < joined_.size(); ++i) {
      if (joined_[i].last_op > joined_[i].joined_back) {
        std::shared_ptr<StreamState> s = streams_[i].lock();
        const std::string unjoined = s ? s->name() : "a stream";
        error = std::make_exception_ptr(StateError(
            name_ + ": " + unjoined + " joined the capture (it waited on an event recorded in it) "
            "but its last work was not joined back: record an event on " + unjoined +
            " and have the capture's stream wait on it before the capture ends"));
      }
    }
  }
  if (!error) {
    // The last stretch, once every op issued on the streams is in (they are detached).
    std::lock_guard order(record_mu_);
    try {
      std::unique_ptr<GraphStretch> last = recorder_->cut(true);
      std::lock_guard lock(mu_);
      if (last) graph_->stretches_.push_back(std::move(last));
      std::stable_sort(graph_->points_.begin(), graph_->points_.end(),
                       [](const GraphPoint& a, const GraphPoint& b) { return a.position < b.position; });
      graph = std::move(graph_);
    } catch (...) {
      error = std::current_exception();
    }
  }
  close_recorder();
  if (error) {
    {
      std::lock_guard lock(mu_);
      phase_ = Phase::ended;
      if (!abandoned_) abandoned_ = error;
    }
    finish_work(error);
    std::rethrow_exception(error);
  }
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::ended;
  }
  // What the capture stood for has no value until a replay: its tensors and events say so.
  try {
    error = std::make_exception_ptr(StateError(
        "this belongs to graph " + std::to_string(id_) + ", captured on " + graph->captured_on_ +
        ", and has no value until the graph is replayed: call replay() first, then wait on "
        "what it returns"));
  } catch (...) {
    error = out_of_memory_error();
  }
  finish_work(error);
  own_.clear();
  return graph;
}

void CaptureState::close_recorder() noexcept {
  // Under no runtime lock: a GPU's recorder ends its native capture and lets its stream go.
  std::unique_ptr<GraphRecorder> recorder;
  {
    std::lock_guard order(record_mu_);
    recorder = std::move(recorder_);
  }
}

void CaptureState::discard() noexcept {
  try {
    (void)abandon(std::make_exception_ptr(StateError(name_ + " was left without being ended")));
  } catch (...) {
    (void)abandon(out_of_memory_error());
  }
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::ended) return;
    phase_ = Phase::ending;
  }
  detach_streams();
  close_recorder();
  std::lock_guard lock(mu_);
  phase_ = Phase::ended;
}

std::pair<std::shared_ptr<TensorState>, std::uint64_t> CaptureState::draw(
    std::uint64_t blocks, const std::function<GraphDraws()>& make) {
  check_open();
  GraphDraws made;  // released after the lock, if another thread's came first
  std::unique_lock lock(mu_);
  if (phase_ != Phase::open) throw_closed_locked();
  GraphDraws& draws = graph_->draws_;
  if (!draws.cell) {
    lock.unlock();
    made = make();  // allocates the cell, which the capture adopts (under mu_)
    lock.lock();
    if (phase_ != Phase::open) throw_closed_locked();
    if (!draws.cell) {
      draws.cell = std::move(made.cell);
      draws.write = std::move(made.write);
      // Written by each replay before its ops read it: the replays' hazards order it.
      draws.cell->storage->mark_escaped();
      if (find_tensor(graph_->writes_, *draws.cell) == graph_->writes_.size()) graph_->writes_.push_back(draws.cell);
    }
  }
  const std::uint64_t offset = draws.blocks;
  draws.blocks += blocks;
  return {draws.cell, offset};
}

Ref<Storage> CaptureState::shared_scratch(std::size_t bytes,
                                          const std::function<Ref<Storage>(std::size_t)>& make) {
  {
    // Only while the capture is open: an op that finds the capture ending runs eagerly, with
    // the stream's own scratch (GraphDraws' cell makes a late random op fail instead).
    std::lock_guard lock(mu_);
    if (phase_ != Phase::open) return nullptr;
  }
  {
    std::lock_guard lock(scratch_mu_);
    if (scratch_ && scratch_->bytes() >= bytes) return scratch_;
  }
  Ref<Storage> made = make(bytes);  // no lock held: it allocates
  Ref<Storage> smaller;  // released after the lock
  std::lock_guard lock(scratch_mu_);
  if (!scratch_ || scratch_->bytes() < bytes) {
    smaller = std::exchange(scratch_, std::move(made));
  }
  return scratch_;
}

// --- GraphState -----------------------------------------------------------------------------

std::string GraphState::str() const {
  return "graph " + std::to_string(id_) + " (" + std::to_string(nodes_.size()) +
         (nodes_.size() == 1 ? " op" : " ops") + ", captured on " + captured_on_ + ")";
}

std::vector<Ref<Work>> GraphState::replay(StreamState& stream) {
  if (stream.device() != device_) {
    throw InvalidArgument("replay of " + str() + " on " + stream.name() +
                          ": a graph replays on a stream of the device it was captured on (" +
                          device_.str() + ")");
  }
  // Every stretch declares the graph's tensors, so that whatever the stream does not order
  // (another stream's readers and writers, which may act as soon as a point's event finishes)
  // is ordered by the hazards against each stretch. The first one overwrites the graph's own
  // tensors whole (the previous replay only orders it); each later one also reads everything
  // the graph writes, so that it fails, as an eager op would, after a stretch that failed.
  std::vector<TensorState*> first_reads;
  std::vector<TensorState*> later_reads;
  std::vector<TensorState*> writes;
  for (const auto& t : reads_) first_reads.push_back(t.get());
  later_reads = first_reads;
  for (const auto& t : writes_) {
    writes.push_back(t.get());
    if (std::find(later_reads.begin(), later_reads.end(), t.get()) == later_reads.end()) {
      later_reads.push_back(t.get());
    }
  }
  // While a profiler records, each op keeps the times of its parts, to be drawn in its bar.
  const bool keeps_parts = observer() != nullptr;
  LaunchOptions first;
  first.overwrites = true;
  first.also_after = after_;
  first.keeps_parts = keeps_parts;
  LaunchOptions later;
  later.keeps_parts = keeps_parts;
  // The graph's random numbers: this replay's, from the device's generator, written into the
  // cell first (GraphDraws). (A replay that then fails to be issued, out of memory for the
  // words' staging or on a stream of another thread's, has moved the generator on.)
  Callback draw;
  if (draws_.cell) {
    const auto [seed, base] = Runtime::get().context(device_).reserve_random(draws_.blocks);
    auto [write, keep] = draws_.write(stream, seed, base);
    draw = std::move(write);
    first.keep = std::move(keep);
  }

  std::shared_ptr<GraphState> self = shared_from_this();
  std::lock_guard whole(replay_mu_);
  std::vector<Ref<Work>> ops;
  Ref<Work> a_marker;
  std::vector<Ref<Work>> trailing;  // markers after the last stretch
  std::size_t point = 0;
  const std::string name = "replay of graph " + std::to_string(id_);
  // One op per stretch, and the markers of the points before it.
  for (std::size_t k = 0; k <= stretches_.size(); ++k) {
    for (; point < points_.size() && points_[point].position == k; ++point) {
      EventState& e = *points_[point].event;
      Ref<Work> marker = stream.mark(e.timing_enabled() ? StreamState::MarkerTiming::timed
                                                        : StreamState::MarkerTiming::untimed);
      // Once per replay: an event the previous replay finished starts afresh here.
      e.record(marker, device_, EventState::Round::fresh);
      a_marker = std::move(marker);
      if (k == stretches_.size()) trailing.push_back(a_marker);  // after the last stretch
    }
    if (k == stretches_.size()) break;
    const bool is_first = ops.empty();
    Callback run = stretches_[k]->replay_on(stream);
    if (is_first && draw) {
      run = [draw = std::move(draw), run = std::move(run)]() mutable {
        draw();
        run();
      };
    }
    ops.push_back(stream.launch(name, is_first ? first_reads : later_reads, writes,
                                [self, run = std::move(run)]() mutable { run(); }, is_first ? first : later));
  }
  if (ops.empty() && !a_marker) ops.push_back(stream.mark(StreamState::MarkerTiming::timed));  // an empty graph
  // The replay is done when all it issued is: the events' points after its last op too.
  for (Ref<Work>& m : trailing) ops.push_back(std::move(m));
  return ops;
}

}  // namespace eventide::detail
