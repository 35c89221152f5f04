// The public Graph and Capture (eventide/graph.hpp), over core/capture.hpp.
#include "eventide/graph.hpp"

#include <utility>

#include "core/capture.hpp"
#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "eventide/errors.hpp"

namespace eventide {

namespace {

Device capture_device() {
  std::optional<Device> d = detail::block_device();
  return d ? *d : default_device();
}

}  // namespace

Event Graph::replay(const Stream& stream) const {
  if (!state_) throw StateError("Graph::replay: this Graph holds no graph (end a Capture to get one)");
  detail::StreamState& s = *stream.state();
  if (s.in_capture()) [[unlikely]] s.refuse_in_capture("a replay of " + state_->str());
  std::vector<detail::Ref<detail::Work>> works = state_->replay(s);
  Event done(state_->device());
  for (auto& w : works) done.state()->record(std::move(w), state_->device());
  return done;
}

Event Graph::replay() const {
  if (!state_) throw StateError("Graph::replay: this Graph holds no graph (end a Capture to get one)");
  return replay(Stream::current(state_->device()));
}

Device Graph::device() const {
  if (!state_) throw StateError("Graph::device: this Graph holds no graph");
  return state_->device();
}

std::size_t Graph::ops() const { return state_ ? state_->ops() : 0; }

std::string Graph::str() const { return state_ ? state_->str() : "<no graph>"; }

// Without a stream: a new one, on which no other code issues work. (Nothing needs to order it
// after the stream that was current: a replay is ordered by the tensors it uses.)
Capture::Capture() : Capture(Stream(capture_device())) {}

Capture::Capture(Device device) : Capture(Stream(device)) {}

Capture::Capture(const Stream& stream, CaptureOptions options)
    : stream_(stream), state_(detail::CaptureState::begin(stream.state())) {
  try {
    if (options.make_current) guard_.emplace(stream_);
  } catch (...) {
    state_->discard();  // (no destructor runs for a constructor that throws)
    throw;
  }
}

Capture::~Capture() {
  guard_.reset();
  if (state_) state_->discard();
}

Graph Capture::end() {
  if (!state_) throw StateError("Capture::end: the capture has ended already");
  std::shared_ptr<detail::CaptureState> state = std::move(state_);
  return Graph(state->end());
}

}  // namespace eventide
