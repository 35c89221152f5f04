// Benchmarking a function: eventide::benchmark makes warm-up runs, then timed runs each between
// two markers on the current stream, and reports host and device time per run. r.str() is one
// line without a line end ("matmul : host: ...    device (cpu): ..."), printed with one.
#include <eventide/eventide.hpp>

#include <cstdio>

namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({256, 256});
  ev::Tensor b = ev::randn({256, 256});
  ev::BenchmarkResult r = ev::benchmark([&] { ev::matmul(a, b); },
                                        {.n_repeat = 50, .n_warmup = 5, .name = "matmul"});
  std::printf("%s\n", r.str().c_str());
  const ev::BenchmarkStats device = r.device_stats();
  if (r.device_times.size() != 50 || device.min.count() <= 0) {
    std::fprintf(stderr, "expected 50 runs with positive device times\n");
    return 1;
  }
  std::printf("matmul p50 %.1f us, p99 %.1f us on %s\nok\n", device.p50.count(), device.p99.count(),
              r.device.str().c_str());
  return 0;
}
