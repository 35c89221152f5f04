// Seed: "Other ways: the threading module" (point 11):
//   event = threading.Event()
//   def on_complete(): event.set()
//   output.add_completion_callback(on_complete); event.wait(); print(output)
// Here the waiter is a std::thread and threading.Event a mutex + condition variable.
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
