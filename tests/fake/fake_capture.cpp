// The fake device's native capture: see fake/fake_capture.hpp.
#include "fake/fake_capture.hpp"

#include <utility>

#include <eventide/errors.hpp>

namespace eventide_fake {

namespace detail = eventide::detail;

namespace {

class FakeFollowingRecorder final : public detail::GraphRecorder {
 public:
  FakeFollowingRecorder(std::shared_ptr<NativeCapture> capture, std::string stream)
      : capture_(std::move(capture)), stream_(std::move(stream)) {}
  void* native_stream() const noexcept override { return capture_.get(); }
  void add(const std::string&, detail::Callback body) override {
    if (!body) return;
    std::lock_guard lock(capture_->mu);
    capture_->bodies.push_back(std::move(body));
  }
  std::unique_ptr<detail::GraphStretch> cut(bool last) override {
    if (last) return nullptr;
    throw eventide::StateError("the native capture of " + stream_ + " cannot be cut by eventide");
  }
  std::string follows() const override { return "native capture of " + stream_; }
  bool still_open() const noexcept override { return capture_->open.load(std::memory_order_acquire); }
  void keep_with_graph(detail::Callback release) override {
    std::lock_guard lock(capture_->mu);
    capture_->release = std::move(release);
  }

 private:
  std::shared_ptr<NativeCapture> capture_;
  std::string stream_;
};

}  // namespace

std::unique_ptr<detail::GraphRecorder> follow_fake_capture(std::shared_ptr<NativeCapture> capture,
                                                           std::string stream) {
  return std::make_unique<FakeFollowingRecorder>(std::move(capture), std::move(stream));
}

NativeGraph::~NativeGraph() {
  if (!capture_) return;
  detail::Callback release;  // as CUDA does when the graph goes
  {
    std::lock_guard lock(capture_->mu);
    release = std::move(capture_->release);
  }
  if (release) release();
}

std::size_t NativeGraph::nodes() const {
  std::lock_guard lock(capture_->mu);
  return capture_->bodies.size();
}

void NativeGraph::replay() const {
  std::lock_guard lock(capture_->mu);
  for (detail::Callback& body : capture_->bodies) body();
}

}  // namespace eventide_fake
