// Cross-device stream waits (issue 14, part 1): a stream of cuda:1 waiting for an event of
// cuda:0 and back, through eventide beside raw cudaEventRecord + cudaStreamWaitEvent, measured
// in the same process (measure/cuda_measure.hpp, cross_device_wait).
//
//   eventide_bench_multi_gpu [--quick] [--pingpongs=N] [--rounds=N]
//
// Each round holds cuda:0 behind a GPU-side gate, enqueues N ping-pongs (a tiny kernel on
// cuda:0, cuda:1's stream waits for it, a tiny kernel on cuda:1, cuda:0's stream waits for
// that), opens the gate and reads the chain's GPU time on cuda:0: per one-way wait, the time
// from the end of one device's kernel to the end of the next one's on the other device (a
// wait plus the smallest kernel). Prints ours beside the anchor (p50 / p99 over the rounds).
// Skips, saying so, where there are fewer than two GPUs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <eventide/eventide.hpp>

#include "measure/cuda_measure.hpp"
#include "measure/suite.hpp"

namespace ev = eventide;
namespace mb = eventide::bench;

int main(int argc, char** argv) {
  bool quick = false;
  int pingpongs = 0, rounds = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strncmp(argv[i], "--pingpongs=", 12) == 0) {
      pingpongs = std::atoi(argv[i] + 12);
    } else if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--pingpongs=N] [--rounds=N]\n", argv[0]);
      return 2;
    }
  }
  if (pingpongs <= 0) pingpongs = quick ? 20 : 100;
  if (rounds <= 0) rounds = quick ? 10 : 50;

  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  const ev::Device a = ev::Device::cuda(0), b = ev::Device::cuda(1);
  if (count < 2 || !ev::is_available(b)) {
    std::printf("eventide_bench_multi_gpu: needs two CUDA devices, this machine has %d: skipped\n",
                count);
    return 0;
  }
  for (ev::Device d : {a, b}) {
    ev::DeviceInfo info = ev::device_info(d);
    std::printf("%s: %s: %s\n", d.str().c_str(), info.name.c_str(), info.description.c_str());
  }
  int can_access = 0;
  cudaDeviceCanAccessPeer(&can_access, 1, 0);
  std::printf("peer access cuda:1 -> cuda:0: %s\n\n", can_access ? "possible" : "not possible");
  std::fflush(stdout);

  std::vector<mb::Figure> figures;
  try {
    for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      std::fprintf(stderr, "eventide_bench_multi_gpu: %s <-> %s, %d rounds of %d ping-pongs\n",
                   from.str().c_str(), to.str().c_str(), rounds, pingpongs);
      mb::cuda::Compared c = mb::cuda::cross_device_wait(from, to, rounds, pingpongs);
      figures.push_back(mb::time_figure(
          "multi_gpu.wait." + from.str() + "." + to.str(),
          "one-way cross-device stream wait, " + from.str() + " <-> " + to.str() +
              " ping-pong (wait + smallest kernel), p50 / p99",
          mb::time_bar("eventide", c.ours),
          {mb::time_bar("cudaEventRecord + cudaStreamWaitEvent", c.anchor)}, "-", std::nullopt,
          std::nullopt, true));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eventide_bench_multi_gpu: %s\n", e.what());
    return 1;
  }
  std::fputs(mb::markdown_table(figures).c_str(), stdout);
  return 0;
}
