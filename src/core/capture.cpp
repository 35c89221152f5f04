// Graph capture: see core/capture.hpp (the replay: core/graph_replay.cpp).
#include "core/capture.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/dispatcher.hpp"
#include "core/event_state.hpp"
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
  // For a capture that follows other code's: its recorder, and the task that ends it on
  // `dispatcher` when a poll finds that capture over (posted once).
  void follow(std::shared_ptr<GraphRecorder> recorder, Dispatcher& dispatcher) {
    std::weak_ptr<CaptureState> capture = capture_;
    end_task_ = std::make_unique<CallbackTask>(Callback([capture] {
      if (std::shared_ptr<CaptureState> c = capture.lock()) c->end_followed();
    }));
    dispatcher_ = &dispatcher;
    followed_ = std::move(recorder);
  }
  std::shared_ptr<CaptureState> capture() const noexcept { return capture_.lock(); }
  // Captured work was polled: the capture's next call abandons it (CaptureState::check_open).
  bool looked() const noexcept { return looked_.load(std::memory_order_acquire); }

 protected:
  void demanded(std::uint64_t seq, Demand how) noexcept override {
    (void)seq;
    if (followed_ && !followed_->still_open()) {
      // Other code's capture is over, and this capture has not seen it yet: it ends now (a
      // host wait: under no lock), or on the dispatcher (a poll, under any lock: only posted).
      if (how == Demand::soon) {
        if (!end_posted_.exchange(true, std::memory_order_acq_rel)) {
          CallbackList task;
          task.push_back(std::move(end_task_));
          dispatcher_->post(std::move(task), nullptr);
        }
      } else if (std::shared_ptr<CaptureState> c = capture_.lock()) {
        c->end_followed();
      }
      return;
    }
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
  std::shared_ptr<GraphRecorder> followed_;
  std::unique_ptr<CallbackTask> end_task_;
  Dispatcher* dispatcher_ = nullptr;
  std::atomic<bool> end_posted_{false};
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
  if (std::shared_ptr<CaptureState> c = of(*producer); c && !producer->done()) return c->add_event(nullptr, event);
  return producer;
}

CaptureState::CaptureState(const std::shared_ptr<StreamState>& origin, std::string name)
    : device_(origin->device()),
      id_(++next_graph_id),
      name_(name.empty() ? "the capture of graph " + std::to_string(id_) + " on " + origin->name() : std::move(name)),
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
  std::shared_ptr<CaptureState> c(new CaptureState(origin, {}));
  c->recorder_ = backend.record_graph("graph " + std::to_string(c->id_) + ", captured on " + origin->name());
  c->native_ = c->recorder_->native_stream();
  c->start(nullptr);
  origin->begin_capture(c);  // throws if the stream captures already: nothing else holds c
  return c;
}

void CaptureState::start(std::shared_ptr<GraphRecorder> followed) {
  open_captures.fetch_add(1, std::memory_order_acq_rel);
  timeline_ = make_ref<CaptureTimeline>("graph " + std::to_string(id_) + " (capture)", weak_from_this());
  if (followed) timeline_->follow(std::move(followed), Runtime::get().dispatcher(device_));
  work_ = make_ref<Work>(timeline_, "graph " + std::to_string(id_) + " (captured work)", WorkKind::op);
  work_->set_seq(1);
}

std::shared_ptr<CaptureState> CaptureState::follow(const std::shared_ptr<StreamState>& stream,
                                                   std::unique_ptr<GraphRecorder> recorder) {
  std::shared_ptr<GraphRecorder> followed(std::move(recorder));
  std::shared_ptr<CaptureState> c(new CaptureState(stream, "the " + followed->follows() + ", begun by other code"));
  c->native_ = followed->native_stream();
  c->followed_ = followed;
  c->start(followed);
  // The graph keeps the capture, and with it all its ops use, until the graph is gone; then
  // it is let go on the device's dispatcher (the device's own thread may not release memory).
  Dispatcher& dispatcher = Runtime::get().dispatcher(c->device_);
  dispatcher.ensure_thread();
  auto release = std::make_unique<CallbackTask>(Callback([c] {}));
  followed->keep_with_graph(Callback([release = std::move(release), d = &dispatcher]() mutable {
    CallbackList task;
    task.push_back(std::move(release));
    d->post(std::move(task), nullptr);
  }));
  stream->begin_capture(c);  // the caller saw the stream in no capture
  return c;
}

void CaptureState::end_followed() noexcept {
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::ending || phase_ == Phase::ended) return;
    phase_ = Phase::ending;
  }
  detach_streams();
  std::vector<std::shared_ptr<TensorState>> own;  // released under no lock
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::ended;
    own.swap(own_);
  }
  finish_work(nullptr);  // (an abandoned capture's Work has failed already)
}

void CaptureState::refuse_followed(const std::string& what) {
  refuse(what + ": eventide cannot put that in a graph that other code replays; issue it before "
         "or after that capture, or capture the work with eventide's own capture (ev.capture), "
         "whose replays eventide sees");
}

CaptureState::~CaptureState() {
  open_captures.fetch_sub(1, std::memory_order_acq_rel);
  // A capture Work is always finished: a Work nobody finishes would hang its waiters. (One
  // that follows other code's capture is over once that code's graph is gone.)
  if (work_ && !work_->done()) {
    finish_work(abandoned_ ? abandoned_ : followed_ ? nullptr : out_of_memory_error());
  }
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
  return recorder_ ? *recorder_ : *followed_;
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
  // The graph's own memory: never reused in stream order (and, in other code's graph,
  // rewritten at replays eventide does not see).
  if (followed_) {
    tensor.storage->mark_in_other_graph();
  } else {
    tensor.storage->mark_escaped();
  }
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
  if (followed_) {
    // Refused before anything is done to the native stream, so that the capture stays valid.
    auto check = [&](TensorState* t, bool writing) {
      if (Ref<Work> w = t->unsettled_besides(*work_, writing)) {
        refuse_followed(name + " uses a tensor that " + w->describe() +
                        (w->done() ? " failed to write" : " still " + std::string(writing ? "uses" : "writes")) +
                        " (a graph cannot wait for eventide's work at each replay; wait for it "
                        "before the capture begins)");
      }
    };
    for (TensorState* t : reads) check(t, false);
    for (TensorState* t : writes) check(t, true);
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
    if (followed_) t->storage->mark_in_other_graph();  // rewritten at that code's replays
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
  if (followed_) {
    refuse_followed(event->str() + " recorded " + (stream ? "on " + stream->name() : "on a tensor of it") +
                    " (an event finishes at each replay of eventide's own graphs only; record "
                    "the other code's event there, torch.cuda.Event(external=True))");
  }
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
  if (followed_) {
    for (const Ref<Work>& w : pending) {
      if (w != work_) refuse_followed(stream.name() + " waits for " + w->describe() + ", eventide's work still running");
    }
  }
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
  if (followed_) refuse_followed("random numbers (rand, randn: each replay of eventide's graphs draws afresh)");
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

}  // namespace eventide::detail
