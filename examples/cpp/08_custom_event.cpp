// An event class of your own (tutorial point 12): set() and wait(), driven by a completion
// callback. Its wait() sleeps on a condition variable until set() wakes it, instead of spinning
// on a flag as the tutorial's does.
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>

#include <eventide/eventide.hpp>
namespace ev = eventide;

class MyEvent {
 public:
  void set() {
    std::lock_guard lock(mu_);
    completed_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return completed_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool completed_ = false;
};

int main() {
  ev::Tensor output = ev::matmul(ev::randn({1024, 1024}), ev::randn({1024, 1024}));

  auto event = std::make_shared<MyEvent>();
  output.add_completion_callback([event] { event->set(); });  // on_complete

  event->wait();

  std::printf("MyEvent::wait() returned; output ready: %s\n", output.ready() ? "true" : "false");
  return output.ready() ? 0 : 1;
}
