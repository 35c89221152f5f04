// Polling (tutorial point 4): poll() answers at once, so the host keeps working until the op
// is done.
#include <cmath>
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({1024, 1024}), b = ev::randn({1024, 1024});
  ev::Tensor output = ev::matmul(a, b);
  ev::Event event;
  event.record(output);

  long iterations = 0;
  double other_work = 0;
  while (!event.poll()) {  // never blocks
    for (int i = 0; i < 1000; ++i) other_work += std::sin(i);  // the host's own work
    ++iterations;
  }

  std::printf("poll() was false %ld times (other work: %.2f); output ready: %s\n", iterations,
              other_work, output.ready() ? "true" : "false");
  return output.ready() ? 0 : 1;
}
