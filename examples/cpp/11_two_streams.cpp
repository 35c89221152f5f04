// Running several ops at once (tutorial point 13): two streams run side by side. An event
// recording several ops spans them, from the first start to the last end, so it measures what
// running them on two streams instead of one gains.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({1024, 1024}), b = ev::randn({1024, 1024});
  ev::synchronize();  // the inputs are made before the timed part

  ev::Event one_stream;  // both ops on the current stream, one after the other
  one_stream.record(ev::matmul(a, b));
  one_stream.record(ev::matmul(b, a));
  one_stream.wait();

  ev::Stream s1, s2;
  ev::Tensor o1, o2;
  {
    ev::StreamGuard guard(s1);
    o1 = ev::matmul(a, b);
  }
  {
    ev::StreamGuard guard(s2);
    o2 = ev::matmul(b, a);  // reads a and b too: safe, no race
  }
  ev::Event two_streams;
  two_streams.record(o1);
  two_streams.record(o2);
  two_streams.wait();

  double t1 = one_stream.time_elapsed().count(), t2 = two_streams.time_elapsed().count();
  std::printf("one stream: %.1f us, two streams: %.1f us (%.2fx)\n", t1, t2, t1 / t2);
  return o1.ready() && o2.ready() ? 0 : 1;
}
