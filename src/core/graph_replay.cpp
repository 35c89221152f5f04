// The graph a capture made, and its replay: see core/capture.hpp ("Replay").
#include <algorithm>
#include <utility>

#include "core/capture.hpp"
#include "core/event_state.hpp"
#include "core/observer.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::detail {

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
