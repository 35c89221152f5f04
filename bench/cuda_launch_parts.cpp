// The parts of a small op's host time on a GPU (issue 12; docs/PERFORMANCE.md, "The launch
// path"): the raw CUDA calls an op makes beside eventide's ops with and without a kernel, per
// call, median of 40 batches of 200. Run it once per mode to split the costs:
//   eventide_bench_launch_parts
//   EVENTIDE_CUDA_TIMING=off eventide_bench_launch_parts "timing off"
//   EVENTIDE_CUDA_MEMOPS=0 eventide_bench_launch_parts "memops off"
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <eventide/eventide.hpp>
namespace ev = eventide;
using Clock = std::chrono::steady_clock;
template <class F, class D>
double per_op(F body, D drain, int n = 200, int batches = 40) {
  std::vector<double> v;
  for (int b = 0; b < batches; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) body();
    auto t1 = Clock::now();
    drain();
    v.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int main(int argc, char** argv) {
  ev::Device gpu = ev::Device::cuda(0);
  if (!ev::is_available(gpu)) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  ev::Stream s(gpu), other(gpu);
  ev::StreamGuard g(s);
  cudaStream_t raw = nullptr;
  if (cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) != cudaSuccess) return 1;
  ev::Tensor y = ev::ones({256}, ev::DType::f32, gpu), x = ev::zeros({256}, ev::DType::f32, gpu);
  x.wait();
  auto drain = [&] { s.synchronize(); };
  auto rdrain = [&] { (void)cudaStreamSynchronize(raw); };
  double malloc_free = per_op(
      [&] {
        void* p = nullptr;
        if (cudaMallocAsync(&p, 1024, raw) == cudaSuccess) (void)cudaFreeAsync(p, raw);
      },
      rdrain);
  double set_dev = per_op(
      [&] {
        int d = 0;
        if (cudaGetDevice(&d) == cudaSuccess) (void)cudaSetDevice(d);
      },
      [] {});
  double get_last = per_op([&] { (void)cudaPeekAtLastError(); }, [] {});
  // The calls a marker and a stream wait are made of.
  cudaEvent_t timed = nullptr, untimed = nullptr;
  if (cudaEventCreate(&timed) != cudaSuccess ||
      cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) != cudaSuccess) {
    return 1;
  }
  double rec_timed = per_op([&] { (void)cudaEventRecord(timed, raw); }, rdrain);
  double rec_untimed = per_op([&] { (void)cudaEventRecord(untimed, raw); }, rdrain);
  double wait_event = per_op([&] { (void)cudaStreamWaitEvent(raw, untimed, 0); }, rdrain);
  double is_capturing = per_op(
      [&] {
        cudaStreamCaptureStatus st;
        (void)cudaStreamIsCapturing(raw, &st);
      },
      [] {});
  double exchange_mode = per_op(
      [&] {
        cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&m);
        (void)cudaThreadExchangeStreamCaptureMode(&m);
      },
      [] {});
  double ev_empty = per_op([&] { (void)ev::empty({256}, ev::DType::f32, gpu); }, drain);
  double ev_full = per_op([&] { (void)ev::full({256}, 1.0, ev::DType::f32, gpu); }, drain);
  double ev_add = per_op([&] { x = x + y; }, drain);
  double ev_record = per_op([&] { ev::Event e; e.record(x); }, drain);
  double ev_marker = per_op([&] { ev::Event e; e.record(s); }, drain);
  double ev_enqueue_nop = per_op([&] { (void)s.enqueue("nop", [] {}); }, drain);
  ev::Stream wrapped = ev::Stream::from_native(gpu, raw);
  double ev_marker_wrapped = per_op([&] { ev::Event e; e.record(wrapped); }, rdrain);
  double ev_record_event_wait = per_op([&] { other.wait_event(s.record_event()); }, [&] {
    drain();
    other.synchronize();
  });
  std::printf("%s raw: cudaEventRecord timed %.2f us | untimed %.2f us | cudaStreamWaitEvent %.2f us | "
              "cudaStreamIsCapturing %.2f us | cudaThreadExchangeStreamCaptureMode x2 %.2f us | "
              "eventide record_event+wait_event %.2f us | Event+record(wrapped stream) %.2f us\n",
              argc > 1 ? argv[1] : "default", rec_timed, rec_untimed, wait_event, is_capturing,
              exchange_mode, ev_record_event_wait, ev_marker_wrapped);
  std::printf("%s: cudaMallocAsync+cudaFreeAsync %.2f us | cudaGetDevice+cudaSetDevice %.2f us | "
              "cudaPeekAtLastError %.2f us | ev::empty %.2f us | ev::full %.2f us | x + y %.2f us | "
              "Event+record(tensor) %.2f us | Event+record(stream) %.2f us | enqueue(no launch) %.2f us\n",
              argc > 1 ? argv[1] : "default", malloc_free, set_dev, get_last, ev_empty, ev_full, ev_add,
              ev_record, ev_marker, ev_enqueue_nop);
  (void)cudaEventDestroy(timed);
  (void)cudaEventDestroy(untimed);
  (void)cudaStreamDestroy(raw);
}
