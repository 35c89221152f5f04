// Timing an op (tutorial point 7): time_elapsed() reads the device time of the work the event
// was recorded on, in microseconds.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  const std::int64_t n = 1024;
  ev::Tensor a = ev::randn({n, n}), b = ev::randn({n, n});

  ev::Tensor output = ev::matmul(a, b);
  ev::Event event;
  event.record(output);
  event.wait();

  // A std::chrono duration in microseconds: the unit is part of the type.
  std::chrono::duration<double, std::micro> t = event.time_elapsed();
  double gflops = 2.0 * n * n * n / (t.count() * 1e3);
  std::printf("Time elapsed: %.1f us (%.1f GFLOP/s)\n", t.count(), gflops);
  return t.count() > 0 ? 0 : 1;
}
