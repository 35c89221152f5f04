// One event for several ops (tutorial point 2). Records accumulate: the event finishes when
// every tied op has, and time_elapsed() spans them all.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({512, 512}), b = ev::randn({512, 512});

  // Hold the second op back until we say so, to show the event waits for it.
  ev::UserEvent gate;
  ev::Stream side;
  side.wait(gate);

  ev::Tensor out1 = ev::matmul(a, b);
  ev::Tensor out2;
  {
    ev::StreamGuard guard(side);
    out2 = ev::matmul(b, a);
  }

  ev::Event event;
  event.record(out1);
  event.record(out2);

  out1.wait();
  std::printf("op 1 done, op 2 held: event completed = %s\n", event.completed() ? "true" : "false");
  if (event.completed()) return 1;

  gate.set();
  event.wait();
  std::printf("both done: event completed = %s, time_elapsed = %.1f us\n",
              event.completed() ? "true" : "false", event.time_elapsed().count());
  return out2.ready() ? 0 : 1;
}
