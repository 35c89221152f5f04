// Graphs on a GPU beside raw CUDA graphs of the same kernels (cuda_measure.hpp, "Graphs"),
// measured in the same process, alternating round by round.
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <eventide/graph.hpp>

#include "cuda_kernels.hpp"
#include "cuda_measure.hpp"
#include "cuda_raw.hpp"
#include "measure.hpp"

namespace ev = eventide;

namespace eventide::bench::cuda {

namespace {

// A raw CUDA graph of what `issue(stream)` launches, instantiated; destroyed with it.
class RawGraph {
 public:
  template <class Issue>
  RawGraph(cudaStream_t s, Issue&& issue) {
    EVENTIDE_BENCH_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    issue(s);
    cudaGraph_t g = nullptr;
    EVENTIDE_BENCH_CHECK(cudaStreamEndCapture(s, &g));
    const cudaError_t made = cudaGraphInstantiateWithFlags(&exec_, g, 0);
    cudaGraphDestroy(g);
    EVENTIDE_BENCH_CHECK(made);
    EVENTIDE_BENCH_CHECK(cudaGraphUpload(exec_, s));
  }
  ~RawGraph() { cudaGraphExecDestroy(exec_); }
  RawGraph(const RawGraph&) = delete;
  RawGraph& operator=(const RawGraph&) = delete;
  void launch(cudaStream_t s) { EVENTIDE_BENCH_CHECK(cudaGraphLaunch(exec_, s)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

constexpr int kElems = 256;

}  // namespace

Compared graph_chain(Device gpu, int rounds, int chain) {
  use_device(gpu);
  ev::Stream s(gpu);
  ev::StreamGuard guard(s);
  const ev::Tensor y = ev::ones({kElems}, ev::DType::f32, gpu);
  const ev::Tensor x = ev::zeros({kElems}, ev::DType::f32, gpu);
  ev::Graph g;
  {
    ev::Capture capture(s);
    for (int i = 0; i < chain; ++i) ev::add_out(x, x, y);
    g = capture.end();
  }
  RawStream raw;
  DeviceMemory a(kElems * sizeof(float)), one(kElems * sizeof(float)), out(kElems * sizeof(float));
  EVENTIDE_BENCH_CHECK(cudaMemset(a.p, 0, kElems * sizeof(float)));
  EVENTIDE_BENCH_CHECK(cudaMemset(one.p, 0, kElems * sizeof(float)));
  RawGraph raw_graph(raw.s, [&](cudaStream_t on) {
    auto* pa = static_cast<float*>(a.p);
    auto* po = static_cast<float*>(out.p);
    for (int i = 0; i < chain; ++i) {
      kernels::add(pa, static_cast<const float*>(one.p), po, kElems, on);  // each reads the last
      std::swap(pa, po);
    }
  });
  g.replay(s).wait();  // warm
  raw_graph.launch(raw.s);
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  Compared c;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    g.replay(s).wait();
    c.ours.push_back(ns_between(t0, Clock::now()) / chain);
    t0 = Clock::now();
    raw_graph.launch(raw.s);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    c.anchor.push_back(ns_between(t0, Clock::now()) / chain);
    t0 = Clock::now();
    for (int i = 0; i < chain; ++i) ev::add_out(x, x, y);
    x.wait();
    c.anchor2.push_back(ns_between(t0, Clock::now()) / chain);
  }
  return c;
}

Compared graph_round_trip(Device gpu, int rounds) {
  use_device(gpu);
  ev::Stream s(gpu);
  const ev::Tensor y = ev::ones({kElems}, ev::DType::f32, gpu);
  const ev::Tensor x = ev::zeros({kElems}, ev::DType::f32, gpu);
  ev::Graph g;
  {
    ev::Capture capture(s);
    ev::add_out(x, x, y);
    g = capture.end();
  }
  RawStream raw;
  DeviceMemory a(kElems * sizeof(float)), one(kElems * sizeof(float));
  EVENTIDE_BENCH_CHECK(cudaMemset(a.p, 0, kElems * sizeof(float)));
  EVENTIDE_BENCH_CHECK(cudaMemset(one.p, 0, kElems * sizeof(float)));
  RawGraph raw_graph(raw.s, [&](cudaStream_t on) {
    kernels::add(static_cast<const float*>(a.p), static_cast<const float*>(one.p), static_cast<float*>(a.p),
                 kElems, on);
  });
  g.replay(s).wait();
  Compared c;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    g.replay(s).wait();
    c.ours.push_back(ns_between(t0, Clock::now()));
    t0 = Clock::now();
    raw_graph.launch(raw.s);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    c.anchor.push_back(ns_between(t0, Clock::now()));
  }
  return c;
}

MatmulResult graph_matmul(Device gpu, int n, int count, int trials) {
  use_device(gpu);
  Tf32Setting tf32_setting(false);
  ev::Stream s(gpu);
  const ev::Tensor a = ev::randn({n, n}, ev::DType::bf16, gpu), b = ev::randn({n, n}, ev::DType::bf16, gpu);
  const ev::Tensor out = ev::empty({n, n}, ev::DType::bf16, gpu);
  ev::synchronize(gpu);
  ev::Graph g;
  {
    ev::Capture capture(s);
    for (int i = 0; i < count; ++i) ev::matmul_out(out, a, b);
    g = capture.end();
  }
  DirectLt direct(n, ev::DType::bf16, false);
  RawStream raw;
  RawGraph raw_graph(raw.s, [&](cudaStream_t on) {
    for (int i = 0; i < count; ++i) direct.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), on);
  });
  const double flops = 2.0 * n * n * static_cast<double>(n) * count;
  constexpr int kReplays = 10;
  g.replay(s).wait();
  raw_graph.launch(raw.s);
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  std::vector<double> ours, theirs;
  for (int trial = 0; trial < trials; ++trial) {
    auto t0 = Clock::now();
    ev::Event last;
    for (int r = 0; r < kReplays; ++r) last = g.replay(s);
    last.wait();
    ours.push_back(flops * kReplays / ns_between(t0, Clock::now()) / 1e3);  // TFLOP/s
    t0 = Clock::now();
    for (int r = 0; r < kReplays; ++r) raw_graph.launch(raw.s);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    theirs.push_back(flops * kReplays / ns_between(t0, Clock::now()) / 1e3);
  }
  return {*std::max_element(ours.begin(), ours.end()), *std::max_element(theirs.begin(), theirs.end())};
}

}  // namespace eventide::bench::cuda
