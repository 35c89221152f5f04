// The host's way of recording a graph (core/graph_recorder.hpp): bodies kept, run again.
#include "core/graph_recorder.hpp"

#include <utility>
#include <vector>

#include "core/work.hpp"
#include "eventide/errors.hpp"

namespace eventide::detail {

namespace {

struct HostNode {
  std::string name;
  Callback body;  // empty for an op that only orders
};

class HostStretch final : public GraphStretch {
 public:
  HostStretch(std::shared_ptr<const std::string> graph, std::vector<HostNode> nodes)
      : graph_(std::move(graph)), nodes_(std::move(nodes)) {}

  Callback replay_on(StreamState& stream) const override {
    (void)stream;  // the bodies use nothing of a stream
    return [this] { run(); };
  }

 private:
  void run() const {
    // Each node's time, for the profiler, where the replay's op keeps them.
    const Work* work = running_work();
    const bool timed = work && work->keeps_parts();
    for (HostNode& n : nodes_) {
      if (!n.body) continue;
      const std::int64_t start = timed ? host_now_ns() : 0;
      try {
        n.body();  // called again at each replay, never consumed
        if (timed) work->add_part(n.name, start, host_now_ns());
      } catch (...) {
        throw OpError(n.name + " failed in a replay of " + *graph_ + ": " +
                          describe_error(std::current_exception()),
                      n.name, std::current_exception());
      }
    }
  }

  std::shared_ptr<const std::string> graph_;
  // (Mutable: a Callback's call is not const; a stretch calls its bodies and changes nothing.)
  mutable std::vector<HostNode> nodes_;
};

class HostGraphRecorder final : public GraphRecorder {
 public:
  explicit HostGraphRecorder(std::string graph)
      : graph_(std::make_shared<const std::string>(std::move(graph))) {}

  void add(const std::string& name, Callback body) override {
    nodes_.push_back(HostNode{name, std::move(body)});
  }

  std::unique_ptr<GraphStretch> cut(bool last) override {
    (void)last;
    if (nodes_.empty()) return nullptr;
    auto stretch = std::make_unique<HostStretch>(graph_, std::move(nodes_));
    nodes_.clear();
    return stretch;
  }

 private:
  std::shared_ptr<const std::string> graph_;
  std::vector<HostNode> nodes_;  // since the last cut
};

}  // namespace

std::unique_ptr<GraphRecorder> make_host_graph_recorder(std::string graph) {
  return std::make_unique<HostGraphRecorder>(std::move(graph));
}

}  // namespace eventide::detail
