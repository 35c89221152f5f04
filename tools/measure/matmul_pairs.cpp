#include "matmul_pairs.hpp"

#include <cblas.h>  // for the types only: this library does not link OpenBLAS (see the header)
#include <dlfcn.h>
#include <sys/resource.h>

#include <stdexcept>

#include <eventide/eventide.hpp>

#include "measure.hpp"

namespace ev = eventide;

namespace eventide::bench {

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Minor page faults of the whole process so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

constexpr int kMaxColdPairs = 10;
constexpr int kMinSteadyPairs = 3;
constexpr std::size_t kMaxSteadyPairs = 500;

}  // namespace

MatmulPairs measure_matmul_pairs(std::int64_t n, double budget_s, SquareSgemm sgemm) {
  const ev::Device cpu = ev::Device::cpu();
  ev::Tensor a = ev::rand({n, n}, ev::DType::f32, cpu);
  ev::Tensor b = ev::rand({n, n}, ev::DType::f32, cpu);
  // The same values for the BLAS.
  const std::vector<float> ha = a.to_vector<float>();
  const std::vector<float> hb = b.to_vector<float>();
  std::vector<float> hc(ha.size());
  const int dim = static_cast<int>(n);
  const long output_pages = static_cast<long>(ha.size() * sizeof(float) / 4096);

  long ours_faults = 0;
  auto ours = [&] {
    const long f0 = minor_faults();
    const auto t0 = Clock::now();
    ev::Tensor c = ev::matmul(a, b);
    ev::Event e;
    e.record(c);
    e.wait();
    const double t = seconds_since(t0);
    ours_faults = minor_faults() - f0;
    return t;
  };
  auto blas = [&] {
    const auto t0 = Clock::now();
    sgemm(dim, ha.data(), hb.data(), hc.data());
    return seconds_since(t0);
  };
  // ABBA: the odd pairs run the BLAS first, so neither side always runs second.
  auto pair = [&](Pairs& into) {
    const bool ours_first = into.ratio.size() % 2 == 0;
    double to = 0, tb = 0;
    if (ours_first) to = ours();
    tb = blas();
    if (!ours_first) to = ours();
    into.ours_s.push_back(to);
    into.blas_s.push_back(tb);
    into.ratio.push_back(tb / to);
  };

  // Warm-up, untimed: OpenBLAS's thread pool and buffers, eventide's worker.
  ours();
  blas();

  MatmulPairs r;
  r.n = n;
  // A tenth of the output's pages or more: still faulting the whole output, give or take.
  while (ours_faults * 10 >= output_pages && static_cast<int>(r.cold.ratio.size()) < kMaxColdPairs) {
    pair(r.cold);
  }
  const auto start = Clock::now();
  while (static_cast<int>(r.steady.ratio.size()) < kMinSteadyPairs ||
         (seconds_since(start) < budget_s && r.steady.ratio.size() < kMaxSteadyPairs)) {
    pair(r.steady);
  }
  return r;
}

double gflops(std::int64_t n, double seconds) {
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
         seconds * 1e-9;
}

namespace {

decltype(&cblas_sgemm) g_loaded_sgemm = nullptr;

void loaded_square_sgemm(int n, const float* a, const float* b, float* c) {
  g_loaded_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

template <class F>
F global_symbol(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p) {
    throw std::runtime_error(std::string("no ") + name +
                             " in the process after eventide loaded OpenBLAS: is the CPU "
                             "backend's BLAS OpenBLAS?");
  }
  return reinterpret_cast<F>(p);
}

}  // namespace

LoadedBlas loaded_openblas() {
  // eventide loads OpenBLAS (RTLD_GLOBAL) at its first matmul; its symbols are then in the
  // process's global scope.
  ev::matmul(ev::ones({2, 2}, ev::DType::f32, ev::Device::cpu()),
             ev::ones({2, 2}, ev::DType::f32, ev::Device::cpu()))
      .wait();
  g_loaded_sgemm = global_symbol<decltype(&cblas_sgemm)>("cblas_sgemm");
  LoadedBlas blas;
  blas.sgemm = loaded_square_sgemm;
  blas.core = global_symbol<char* (*)()>("openblas_get_corename")();
  blas.config = global_symbol<char* (*)()>("openblas_get_config")();
  blas.threads = global_symbol<int (*)()>("openblas_get_num_threads")();
  return blas;
}

}  // namespace eventide::bench
