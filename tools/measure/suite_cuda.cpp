// The CUDA suite: cuda_measure.hpp's measurements as figures with the project's goals
// (docs/PERFORMANCE.md, "CUDA backend").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "cuda_measure.hpp"
#include "measure.hpp"
#include "suite.hpp"

namespace ev = eventide;

namespace eventide::bench {

namespace {

const char* dtype_name(ev::DType dt, bool tf32) {
  if (dt == ev::DType::f32) return tf32 ? "tf32" : "f32";
  return dt == ev::DType::bf16 ? "bf16" : "f16";
}

// A time figure (p50 / p99) whose goal is `factor` times the anchor's p50 in the same run.
Figure relative_figure(const std::string& name, const std::string& title, const cuda::Compared& c,
                       const std::string& anchor, double factor, const std::string& goal_text) {
  Bar ours = time_bar("eventide", c.ours);
  Bar raw = time_bar(anchor, c.anchor);
  const double goal = factor * raw.value;
  return time_figure(name, title, ours, {raw}, goal_text, ours.value <= goal, goal, true);
}

// A throughput figure (TFLOP/s) of ours beside `anchor`, met at `factor` of the anchor's.
Figure tflops_figure(const std::string& name, const std::string& title, const cuda::MatmulResult& r,
                     const std::string& anchor, const std::string& anchor_key, double factor,
                     const std::string& goal, const std::string& note) {
  Figure f;
  f.name = name;
  f.title = title;
  f.unit = Unit::tflops;
  f.ours = Bar{"eventide", r.ours_tflops, std::nullopt};
  f.anchors = {Bar{anchor, r.direct_tflops, std::nullopt}};
  f.ratio = r.ours_tflops / r.direct_tflops;
  f.goal = goal;
  f.goal_value = factor * r.direct_tflops;
  f.met = *f.ratio >= factor;
  f.note = note;
  f.values = {{"eventide_tflops", r.ours_tflops}, {anchor_key, r.direct_tflops}, {"ratio", *f.ratio}};
  return f;
}

}  // namespace

std::vector<Benchmark> cuda_suite(const SuiteOptions& options) {
  if (!options.device.is_cuda()) throw std::invalid_argument("cuda_suite: not a CUDA device");
  const Device gpu = options.device;
  const bool quick = options.quick;
  const int batches = quick ? 200 : 2000;
  const int rounds = quick ? 300 : 3000;
  const int timing_rounds = quick ? 100 : 500;
  std::vector<Benchmark> suite;

  suite.push_back({"launch.add_chain", "a chain of tiny adds back to back beside <<<>>> launches",
                   quick ? 0.2 : 1.0, [=] {
    // Issue 12's goal: an op's host cost within 1.3× a raw launch of its kernel.
    return relative_figure("launch.add_chain", "tiny op (`add` of 256 floats) back to back, per op, p50 / p99",
                           cuda::add_chain(gpu, quick ? 20 : 100), "the same kernel with <<<>>>", 1.3,
                           "≤ 1.3× <<<>>>");
  }});

  suite.push_back({"event.poll", "poll() beside cudaEventQuery", quick ? 0.1 : 0.8, [=] {
    cuda::Compared c = cuda::poll(gpu, batches);
    Bar ours = time_bar("eventide", c.ours);
    return time_figure("event.poll", "`poll()` of a finished event, p50 / p99", ours,
                       {time_bar("cudaEventQuery", c.anchor)}, "≤ 20 ns", ours.value <= 20, 20,
                       true);
  }});

  suite.push_back({"event.record", "Event() + record(tensor) beside cudaEventRecord",
                   quick ? 0.1 : 0.8, [=] {
    cuda::Compared c = cuda::record(gpu, batches);
    Bar ours = time_bar("eventide", c.ours);
    return time_figure("event.record", "`Event()` + `record(tensor)`, timing on, p50 / p99", ours,
                       {time_bar("cudaEventRecord, timing on", c.anchor),
                        time_bar("cudaEventRecord, timing off", c.anchor2)},
                       "≤ 150 ns", ours.value <= 150, 150, true);
  }});

  suite.push_back({"event.marker", "Event() + record(stream) beside cudaEventRecord",
                   quick ? 0.1 : 0.8, [=] {
    cuda::Compared c = cuda::marker(gpu, batches);
    Bar ours = time_bar("eventide", c.ours);
    // A marker is an event record and a progress write in the native stream: it should cost
    // no more than two raw records.
    const double goal = 2.0 * time_bar("", c.anchor).value;
    return time_figure("event.marker",
                       "`Event()` + `record(stream)` (a marker in the native stream), p50 / p99",
                       ours,
                       {time_bar("cudaEventRecord, timing on", c.anchor),
                        time_bar("cudaEventRecord, timing off", c.anchor2)},
                       "≤ 2× cudaEventRecord", ours.value <= goal, goal, true);
  }});

  suite.push_back({"event.marker_region", "the same 100 us kernel read by two markers and by a CUDA event pair",
                   quick ? 0.2 : 1.0, [=] {
    cuda::Compared c = cuda::marker_region(gpu, quick ? 50 : 300);
    Bar ours = time_bar("eventide markers", c.ours);
    Bar pair = time_bar("CUDA event pair", c.anchor);
    const double tolerance = std::max(10'000.0, 0.05 * pair.value);
    return time_figure("event.marker_region",
                       "the same 100 µs kernel: two markers' `elapsed_time` / a CUDA event pair's, p50 / p99",
                       ours, {pair, time_bar("the kernel's own time", c.anchor2)},
                       "within 5% or 10 µs of the pair", std::abs(ours.value - pair.value) <= tolerance,
                       std::nullopt, true);
  }});

  suite.push_back({"stream.wait", "Stream::wait(event) beside cudaStreamWaitEvent",
                   quick ? 0.1 : 0.5, [=] {
    cuda::Compared c = cuda::stream_wait(gpu, batches);
    return time_figure("stream.wait", "`Stream::wait(event)` enqueue, p50 / p99",
                       time_bar("eventide", c.ours), {time_bar("cudaStreamWaitEvent", c.anchor)},
                       "-", std::nullopt, std::nullopt, true);
  }});

  suite.push_back({"wake.gpu_done", "GPU work ends -> wait() returns", quick ? 0.4 : 4.0, [=] {
    cuda::Compared c = cuda::completion_wait(gpu, rounds);
    Bar ours = time_bar("eventide", c.ours);
    return time_figure("wake.gpu_done", "GPU work ends → `wait()` returns, p50 / p99", ours,
                       {time_bar("cudaEventSynchronize", c.anchor),
                        time_bar("floor: host polls a word the kernel writes", c.anchor2)},
                       "≤ 3.5 / 6 µs", ours.value <= 3500 && ours.p99.value_or(0) <= 6000, 3500,
                       true);
  }});

  suite.push_back({"wake.gpu_done_busy", "GPU work of 5 ms ends -> wait() returns",
                   quick ? 0.4 : 3.2, [=] {
    cuda::Compared c = cuda::completion_wait(gpu, quick ? 20 : 200, std::chrono::milliseconds(5));
    Bar ours = time_bar("eventide", c.ours);
    return time_figure("wake.gpu_done_busy",
                       "GPU work of 5 ms ends → `wait()` returns (the waiter asleep), p50 / p99",
                       ours,
                       {time_bar("cudaEventSynchronize", c.anchor),
                        time_bar("floor: host polls a word the kernel writes", c.anchor2)},
                       "≤ 60 µs p99", ours.p99.value_or(0) <= 60'000, 60'000, true);
  }});

  suite.push_back({"callback.gpu_done", "GPU work ends -> a callback runs", quick ? 0.3 : 3.0, [=] {
    cuda::Compared c = cuda::completion_callback(gpu, rounds);
    Bar ours = time_bar("eventide", c.ours);
    return time_figure("callback.gpu_done", "GPU work ends → a callback runs, p50 / p99", ours,
                       {time_bar("cudaLaunchHostFunc", c.anchor)}, "≤ 6 µs", ours.value <= 6000,
                       6000, true);
  }});

  // Issue 12's gated figures: a host-opened gate, a tiny op behind it, its end noticed.
  suite.push_back({"gate.op_wait", "UserEvent gate -> op -> wait() returns", quick ? 0.3 : 2.0, [=] {
    return relative_figure("gate.op_wait", "host `UserEvent` gate → tiny op → `wait()` returns, p50 / p99",
                           cuda::gate_op_wait(gpu, quick ? 50 : 500),
                           "cuStreamWaitValue32 gate + cudaEventSynchronize", 1.2, "≤ 1.2× the GPU-side gate");
  }});

  suite.push_back({"gate.op_callback", "UserEvent gate -> op -> a callback runs", quick ? 0.3 : 2.0, [=] {
    return relative_figure("gate.op_callback", "host `UserEvent` gate → tiny op → a callback runs, p50 / p99",
                           cuda::gate_op_callback(gpu, quick ? 50 : 300),
                           "cuStreamWaitValue32 gate + cudaLaunchHostFunc", 0.3, "≤ 0.3× cudaLaunchHostFunc");
  }});

  suite.push_back({"timing.error", "time_elapsed() beside a CUDA event pair", quick ? 0.1 : 0.5, [=] {
    cuda::Compared c = cuda::timing_error(gpu, timing_rounds);
    Bar ours = time_bar("eventide", c.ours);
    const std::string kernel = format_value(Unit::ns, dist(c.anchor2).p50);
    Figure f = time_figure("timing.error",
                           "`time_elapsed` error for a " + kernel +
                               " kernel (against its own %globaltimer), p50 / p99",
                           ours, {time_bar("CUDA event pair", c.anchor)}, "≤ 1 µs",
                           ours.value <= 1000, 1000, true);
    f.values["kernel_ns_p50"] = dist(c.anchor2).p50;
    return f;
  }});

  // Issue 29: graphs, beside raw CUDA graphs of the same kernels.
  suite.push_back({"graph.chain", "replay of a captured chain of 100 tiny adds beside a raw CUDA graph",
                   quick ? 0.2 : 1.0, [=] {
    cuda::Compared c = cuda::graph_chain(gpu, quick ? 50 : 400, 100);
    Bar ours = time_bar("eventide", c.ours);
    Bar raw = time_bar("the same 100 kernels in a raw CUDA graph", c.anchor);
    const double goal = 1.1 * raw.value;
    return time_figure("graph.chain",
                       "`Graph::replay` + `wait` of a captured chain of 100 tiny adds (256 floats), "
                       "per op, p50 / p99",
                       ours, {raw, time_bar("the same chain, eager eventide", c.anchor2)},
                       "≤ 1.1× the raw graph", ours.value <= goal, goal, true);
  }});

  suite.push_back({"graph.round_trip", "replay() + wait() of one tiny op beside cudaGraphLaunch + sync",
                   quick ? 0.1 : 0.5, [=] {
    return relative_figure("graph.round_trip",
                           "`replay()` + `wait()` of a graph of one tiny op, p50 / p99",
                           cuda::graph_round_trip(gpu, quick ? 200 : 2000),
                           "cudaGraphLaunch + cudaStreamSynchronize", 1.3, "≤ 1.3× the raw one");
  }});

  suite.push_back({"graph.matmul.bf16.n1024", "50 bf16 matmuls n = 1024 replayed beside cuBLASLt in a raw graph",
                   quick ? 0.3 : 1.0, [=] {
    const int trials = quick ? 3 : 5;
    return tflops_figure("graph.matmul.bf16.n1024", "replay of 50 `matmul_out` bf16 n = 1024, throughput",
                         cuda::graph_matmul(gpu, 1024, 50, trials), "cuBLASLt in a raw CUDA graph",
                         "raw_graph_tflops", 0.95, "≥ 95% of the raw graph",
                         "best of " + std::to_string(trials) + " alternating trials of 10 replays");
  }});

  struct Case {
    ev::DType dtype;
    bool tf32;
  };
  const Case cases[] = {{ev::DType::f32, false}, {ev::DType::f32, true},
                        {ev::DType::bf16, false}, {ev::DType::f16, false}};
  for (const Case& k : cases) {
    for (int n : {1024, 4096, 8192}) {
      if (quick && n == 8192) continue;
      const std::string type = dtype_name(k.dtype, k.tf32);
      const std::string name = "matmul." + type + ".n" + std::to_string(n);
      const int trials = quick ? 3 : 5;
      const double estimate = (n == 8192 ? 2.5 : n == 4096 ? 0.8 : 0.4) * trials / 5.0;
      suite.push_back({name, "matmul " + type + " n = " + std::to_string(n) + " beside cuBLASLt",
                       estimate, [=] {
        return tflops_figure(name, "`matmul` " + type + " n = " + std::to_string(n) + " + `record` + `wait`",
                             cuda::matmul(gpu, k.dtype, k.tf32, n, trials), "cuBLASLt, called directly",
                             "cublaslt_tflops", 0.97, "≥ 97% of cuBLASLt",
                             "best of " + std::to_string(trials) + " alternating trials");
      }});
    }
  }
  return suite;
}

}  // namespace eventide::bench
