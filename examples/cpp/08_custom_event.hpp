// An event class of your own (tutorial point 12): set() and wait(), driven by a completion
// callback. Its wait() sleeps on a condition variable until set() wakes it, instead of spinning
// on a flag as the tutorial's does. Run by 08_custom_event.cpp and by `eventide demo`.
#pragma once

#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include <eventide/eventide.hpp>

#include "narrator.hpp"

namespace examples {

class MyEvent {
 public:
  void set() {
    std::lock_guard lock(mu_);
    completed_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return completed_; });  // sleeps in the kernel until set()
  }
  bool completed() {
    std::lock_guard lock(mu_);
    return completed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool completed_ = false;
};

// A MyEvent set when `output` is ready: the tutorial's on_complete, from eventide's callback.
inline std::shared_ptr<MyEvent> my_event_for(eventide::Tensor& output) {
  auto event = std::make_shared<MyEvent>();
  output.add_completion_callback([event] { event->set(); });
  return event;
}

// Waits on anything with wait(): eventide events and your own alike.
template <class... Waitables>
void wait_each(Waitables&... w) {
  (w.wait(), ...);
}

// The CPU time this thread has used (a busy wait would use all of a wait's wall time).
inline std::chrono::microseconds thread_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::microseconds(static_cast<std::int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1'000);
}

// A matmul of `n` x `n` on `device`, waited for through a MyEvent; then a MyEvent and an
// eventide Event waited for side by side.
inline void custom_event(Narrator& say, eventide::Device device, std::int64_t n) {
  namespace ev = eventide;
  using Clock = std::chrono::steady_clock;
  ev::Tensor a = ev::randn({n, n}, ev::DType::f32, device);
  ev::Tensor b = ev::randn({n, n}, ev::DType::f32, device);
  ev::Tensor output = ev::matmul(a, b);
  std::shared_ptr<MyEvent> event = my_event_for(output);
  say.say("output.add_completion_callback([event] { event->set(); })");
  const auto wall0 = Clock::now();
  const auto cpu0 = thread_cpu_time();
  event->wait();
  const auto cpu = thread_cpu_time() - cpu0;
  const auto wall = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - wall0);
  say.say(format("event->wait() blocked %.1f ms and used %.1f ms of CPU (a busy wait would use all of it)",
                 static_cast<double>(wall.count()) / 1e3, static_cast<double>(cpu.count()) / 1e3));
  say.check(output.ready(), "MyEvent must be set only once the op is done");
  // Only meaningful when the wait was long enough to tell spinning from sleeping.
  say.check(wall < std::chrono::milliseconds(2) || cpu < wall / 2, "MyEvent::wait() must block, not spin");

  // It mixes with eventide's own events wherever code only needs wait().
  ev::Tensor output2 = ev::matmul(b, a);
  std::shared_ptr<MyEvent> event2 = my_event_for(output2);
  ev::Event e;
  e.record(output);
  wait_each(e, *event2);
  say.say(format("wait_each(eventide_event, my_event) -> both done: %s",
                 yes_no(e.completed() && event2->completed())));
  say.check(output2.ready(), "wait_each must wait for the custom event too");
}

}  // namespace examples
