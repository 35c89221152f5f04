// The fake device's native capture (fake_backend.hpp): other code's capture of a fake stream's
// native queue, as torch.cuda.graph's of a GPU stream, and the recorder with which eventide
// follows it (core/graph_recorder.hpp). Internal to tests/fake.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/graph_recorder.hpp"
#include "fake/fake_backend.hpp"

namespace eventide_fake {

struct NativeCapture {
  std::atomic<bool> open{true};
  std::mutex mu;
  std::vector<eventide::detail::Callback> bodies;  // what it took, in order
  eventide::detail::Callback release;              // the graph's keep: called when the graph goes
};

// A recorder that follows `capture` of the stream named `stream`: bodies are taken into it.
std::unique_ptr<eventide::detail::GraphRecorder> follow_fake_capture(std::shared_ptr<NativeCapture> capture,
                                                                     std::string stream);

}  // namespace eventide_fake
