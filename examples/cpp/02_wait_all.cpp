// Waiting for a group of ops (tutorial point 8): two products, an event on each, and one
// wait_all call that returns once both are done.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({512, 512}), b = ev::randn({512, 512});
  ev::Tensor c = ev::randn({512, 512}), d = ev::randn({512, 512});

  ev::Tensor output1 = ev::matmul(a, b);
  ev::Tensor output2 = ev::matmul(c, d);

  ev::Event event1, event2;
  event1.record(output1);
  event2.record(output2);

  ev::wait_all({event1, event2});  // returns once both have finished

  std::printf("output1[0] = %.4f, output2[0] = %.4f\n", output1.to_vector<float>()[0],
              output2.to_vector<float>()[0]);
  bool ok = event1.completed() && event2.completed();
  std::printf("both completed: %s\n", ok ? "true" : "false");
  return ok ? 0 : 1;
}
