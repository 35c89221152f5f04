// Reusing an event (tutorial point 5): reset() makes a finished event not completed again,
// ready to be recorded on new work.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor output = ev::matmul(ev::randn({512, 512}), ev::randn({512, 512}));
  ev::Event event;
  event.record(output);
  event.wait();
  std::printf("after wait:  completed = %s\n", event.completed() ? "true" : "false");

  event.reset();  // back to not completed (a StateError while work is still pending)
  std::printf("after reset: completed = %s\n", event.completed() ? "true" : "false");
  if (event.completed()) return 1;

  // The event can be used again.
  event.record(ev::matmul(output, output));
  event.wait();
  std::printf("reused:      completed = %s\n", event.completed() ? "true" : "false");
  return event.completed() ? 0 : 1;
}
