// A process of a pretend job, for trace_merge_test: labels itself (ev::set_process_label),
// profiles a little CPU work (two streams, one waiting for the other: ops, a wait, an arrow,
// a host wait, a range) and writes the Chrome trace.
//
//   trace_rank_writer OUT.json RANK SIZE CLOCK_OFFSET_NS [HOST]
//
// RANK -1 leaves the process unlabelled (the default label). Exit status 0 when written.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <eventide/eventide.hpp>

namespace ev = eventide;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s OUT.json RANK SIZE CLOCK_OFFSET_NS [HOST]\n", argv[0]);
    return 2;
  }
  try {
    const int rank = std::atoi(argv[2]);
    if (rank >= 0) {
      ev::ProcessLabel label;
      label.rank = rank;
      label.size = std::atoi(argv[3]);
      label.clock_offset_ns = std::strtoll(argv[4], nullptr, 10);
      if (argc > 5) label.host = argv[5];
      ev::set_process_label(label);
    }
    const ev::Device cpu = ev::Device::cpu();
    ev::Profiler profiler;
    {
      ev::Range range("step");
      ev::Stream a(cpu), b(cpu);
      ev::Tensor x;
      {
        ev::StreamGuard g(a);
        x = ev::add(ev::ones({64, 64}, ev::DType::f32, cpu), ev::ones({64, 64}, ev::DType::f32, cpu));
      }
      ev::Event e;
      e.record(x);
      b.wait(e);
      ev::Tensor y;
      {
        ev::StreamGuard g(b);
        y = ev::matmul(x, x);
      }
      y.wait();
    }
    ev::Profile p = profiler.stop();
    p.export_chrome_trace(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_rank_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
