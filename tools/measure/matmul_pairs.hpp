// tools/measure/matmul_pairs.hpp: ev::matmul + Event::record + wait on the CPU, against a
// BLAS sgemm called directly on the same matrices by the same process: how much of the BLAS's
// speed eventide keeps.
//
// The two run alternately in one loop (ABBA order), and the figure is the median of the
// per-pair speed ratios. On a shared virtual machine the speed of a whole run drifts by tens
// of percent (neighbours, frequency); back-to-back pairs see the same drift, so their ratio
// does not, where two separate timing windows would each catch a different part of it.
//
// eventide's side includes what a program pays: a new output tensor, the op enqueued on the
// default stream and run by its worker thread, an event recorded on it and waited for. The
// first pairs of a size, while that new output still faults in fresh pages, are kept apart
// ("cold"); the figure is the steady state after them.
//
// Which sgemm is the anchor matters: OpenBLAS picks its kernels when it loads, and eventide
// loads it with the kernels that suit the CPU (src/backends/cpu/blas.hpp). A program that
// links OpenBLAS itself gets OpenBLAS's own choice, for eventide too (eventide then uses the
// instance already loaded); `eventide bench` instead resolves sgemm from the instance eventide
// loaded (loaded_openblas below). Either way both sides run the same kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eventide::bench {

// c = a @ b for row-major n x n matrices.
using SquareSgemm = void (*)(int n, const float* a, const float* b, float* c);

// Times in seconds per call, and the speed of ours over the BLAS's, per pair.
struct Pairs {
  std::vector<double> ours_s;
  std::vector<double> blas_s;
  std::vector<double> ratio;
};

struct MatmulPairs {
  std::int64_t n = 0;
  // While eventide's new output tensors still fault in fresh pages: glibc hands a freed
  // block of this size back to the kernel until its thresholds adapt, so the process's first
  // calls of a size pay for zeroed pages that the BLAS, writing into one buffer, does not.
  Pairs cold;
  // After that: the speed a program that keeps multiplying gets.
  Pairs steady;
};

// Runs pairs of n x n products for about `budget_s` of steady state (at least 3 pairs, at
// most 500) on the CPU device. Blocks meanwhile.
MatmulPairs measure_matmul_pairs(std::int64_t n, double budget_s, SquareSgemm sgemm);

double gflops(std::int64_t n, double seconds);

// The OpenBLAS that eventide's CPU backend loaded (loading it, through a small matmul, if it
// has not been yet): its sgemm and which kernels it runs. Throws std::runtime_error if the
// process has no cblas_sgemm in its global scope after that.
struct LoadedBlas {
  SquareSgemm sgemm = nullptr;
  std::string core;     // openblas_get_corename(): "SkylakeX"
  std::string config;   // openblas_get_config()
  int threads = 0;
};
LoadedBlas loaded_openblas();

}  // namespace eventide::bench
