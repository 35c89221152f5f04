// What the graph tests share: the graph of what a callable issues in a capture, and a
// tensor's values.
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include <eventide/graph.hpp>

#include "test_util.hpp"

namespace eventide_test {

inline std::vector<float> values(const ev::Tensor& t) { return t.to_vector<float>(); }

// The graph of what `issue` issues in a capture on a stream of its own (`issue` may take the
// Capture, for its stream).
template <class F>
ev::Graph captured(F&& issue) {
  ev::Capture capture;
  if constexpr (std::is_invocable_v<F&, ev::Capture&>) {
    issue(capture);
  } else {
    issue();
  }
  return capture.end();
}

}  // namespace eventide_test
