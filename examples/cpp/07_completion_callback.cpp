// Completion callbacks and a waiting thread (tutorial point 11): a callback on the output
// wakes another thread, here a std::thread on a mutex and condition variable (the tutorial
// uses Python's threading.Event).
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include <eventide/eventide.hpp>
namespace ev = eventide;

struct Flag {  // Python's threading.Event
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
};

int main() {
  ev::Tensor output = ev::matmul(ev::randn({1024, 1024}), ev::randn({1024, 1024}));

  // The callback runs on a runtime thread; it owns the flag through a shared_ptr.
  auto flag = std::make_shared<Flag>();
  output.add_completion_callback([flag] {
    std::lock_guard lock(flag->mu);
    flag->set = true;
    flag->cv.notify_all();
  });

  bool ready_when_woken = false;
  std::thread waiter([&] {
    std::unique_lock lock(flag->mu);
    flag->cv.wait(lock, [&] { return flag->set; });  // blocks, no spinning
    ready_when_woken = output.ready();
  });
  waiter.join();

  std::printf("the waiting thread woke; output ready: %s\n", ready_when_woken ? "true" : "false");
  return ready_when_woken ? 0 : 1;
}
