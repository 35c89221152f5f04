// Seeing the work: profile two streams of matmuls joined by events, save a Chrome trace
// (Perfetto, chrome://tracing) and a timeline page, and print each op's device time.
//   example_13_profile_timeline [OUT_DIR]      (default: the current folder)
#include <cstdio>
#include <string>

#include <eventide/eventide.hpp>

namespace ev = eventide;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  ev::Tensor a = ev::rand({512, 512}), b = ev::rand({512, 512});
  a.wait();
  b.wait();

  ev::Profiler profiler;  // records from here...
  ev::Stream s1, s2;
  ev::Tensor x, y;
  {
    ev::StreamGuard g(s1);
    x = ev::matmul(a, b);
  }
  {
    ev::StreamGuard g(s2);
    y = ev::matmul(b, a);
  }
  ev::Event both;
  both.record(x);
  both.record(y);  // one event, two ops
  both.wait();
  ev::Profile p = profiler.stop();  // ...to here, once the recorded work's times are known

  p.export_chrome_trace(dir + "/trace.json");  // https://ui.perfetto.dev, chrome://tracing
  p.export_timeline(dir + "/timeline.html",     // a browser
                    {.title = "Two matmuls on two streams",
                     .note = "They run at the same time; one event waits for both."});
  std::printf("%s\n", p.str().c_str());
  int matmuls = 0;
  for (const ev::ProfiledOp& op : p.ops()) {
    if (!op.start_us) continue;
    std::printf("  %-8s on %-14s %-40s %9.1f us\n", op.name.c_str(), op.stream.c_str(),
                op.detail.c_str(), *op.end_us - *op.start_us);
    matmuls += op.name == "matmul";
  }
  std::printf("wrote %s/trace.json and %s/timeline.html\n", dir.c_str(), dir.c_str());
  if (matmuls != 2) {
    std::fprintf(stderr, "expected two timed matmuls, found %d\n", matmuls);
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
