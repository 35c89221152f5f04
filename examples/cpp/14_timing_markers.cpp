// Timing a region with markers, the idiom of PyTorch and CUDA: record(stream) puts a point at
// the end of the stream, finished when the device reaches it and stamped with that time.
// Two points give the device time between them, whatever the stream did before: here it
// drains and the host idles 200 ms first, which the reading must not count.
#include <chrono>
#include <cstdio>
#include <thread>

#include <eventide/eventide.hpp>
namespace ev = eventide;
using namespace std::chrono_literals;

int main() {
  ev::Stream s;
  ev::StreamGuard guard(s);
  ev::Tensor a = ev::randn({512, 512});
  // A warm-up, as for any timing: the first matmul sets up the math library on the host (on a
  // GPU, cuBLASLt: a fifth of a second), and a region's device time counts whatever the host
  // makes the device wait for inside it.
  ev::matmul(a, a).wait();
  s.synchronize();
  std::this_thread::sleep_for(200ms);  // the host idles; the stream has nothing to do

  ev::Event start, end;
  start.record(s);                     // a marker: a point, not an op
  ev::Tensor c = ev::matmul(a, a);
  ev::Tensor d = ev::matmul(c, a);
  end.record(s);
  end.wait();

  const double ms = start.elapsed_time(end).count();
  ev::Event ops;                       // record(tensor): the op that produced it
  ops.record(c);
  ops.record(d);
  ops.wait();
  std::printf("two matmuls between the markers: %.3f ms (the ops' own time %.3f ms); "
              "a marker alone: time_elapsed %.1f us\n",
              ms, ops.time_elapsed().count() / 1e3, start.time_elapsed().count());
  if (ms <= 0 || ms > 150 || ms * 1e3 < 0.99 * ops.time_elapsed().count()) {
    std::fprintf(stderr, "the reading must be the region's device time, not the host's idle time\n");
    return 1;
  }
  return 0;
}
