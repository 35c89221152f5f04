// Waiting for one op (tutorial points 2 and 3, docs/TUTORIAL.md): start a matrix product, tie
// an event to it, block until it is done, then use the result.
#include <cstdio>
#include <vector>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({512, 512});
  ev::Tensor b = ev::randn({512, 512});

  ev::Tensor output = ev::matmul(a, b);  // asynchronous: returns at once
  ev::Event event;                       // a new event is not completed (tutorial point 1)
  if (event.completed()) return 1;
  event.record(output);                  // tie the event to the matmul
  event.wait();                          // block until the matmul has finished

  std::vector<float> host = output.to_vector<float>();
  std::printf("event completed: %s\n", event.completed() ? "true" : "false");
  std::printf("output[0][0..3] = %.4f %.4f %.4f\n", host[0], host[1], host[2]);
  return event.completed() && output.ready() ? 0 : 1;
}
