// bench/matmul_bench.cpp: ev::matmul + Event::record + wait, against cblas_sgemm called
// directly on the same matrices by the same process: how much of OpenBLAS's speed eventide
// keeps.
//
// The two run alternately in one loop (ABBA order), and the figure is the median of the
// per-pair speed ratios. On a shared virtual machine the speed of a whole run drifts by tens
// of percent (neighbours, frequency); back-to-back pairs see the same drift, so their ratio
// does not, where two separate timing windows would each catch a different part of it.
//
// eventide's side includes what a program pays: a new output tensor, the op enqueued on the
// default stream and run by its worker thread, an event recorded on it and waited for. The
// first pairs of each size, while that new output still faults in fresh pages, are reported
// apart ("cold"); the figure is the steady state after them.
//
// Usage: eventide_bench_matmul [--quick] [--seconds=S] [--out=FILE]
//   (EVENTIDE_BENCH_QUICK=1: --quick). S: steady-state time per size, at least 3 pairs.
// OpenBLAS's kernels depend on its DYNAMIC_ARCH choice (OPENBLAS_CORETYPE overrides it);
// the JSON names the core that ran.
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

namespace ev = eventide;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// Minor page faults of the whole process so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Times in seconds per call, and the speed of ours over cblas's, per pair.
struct Pairs {
  std::vector<double> ours_s;
  std::vector<double> blas_s;
  std::vector<double> ratio;
};

struct SizeResult {
  std::int64_t n = 0;
  // While eventide's new output tensors still fault in fresh pages: glibc hands a freed
  // block of this size back to the kernel until its thresholds adapt, so the process's first
  // calls of a size pay for zeroed pages that cblas, writing into one buffer, does not.
  Pairs cold;
  // After that: the speed a program that keeps multiplying gets.
  Pairs steady;
};

constexpr int kMaxColdPairs = 10;
constexpr int kMinSteadyPairs = 3;

SizeResult measure(std::int64_t n, double budget_s) {
  const ev::Device cpu = ev::Device::cpu();
  ev::Tensor a = ev::rand({n, n}, ev::DType::f32, cpu);
  ev::Tensor b = ev::rand({n, n}, ev::DType::f32, cpu);
  // The same values for cblas.
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, ha.data(), dim,
                hb.data(), dim, 0.0f, hc.data(), dim);
    return seconds_since(t0);
  };
  // ABBA: the odd pairs run cblas first, so neither side always runs second.
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

  SizeResult r;
  r.n = n;
  // A tenth of the output's pages or more: still faulting the whole output, give or take.
  while (ours_faults * 10 >= output_pages && static_cast<int>(r.cold.ratio.size()) < kMaxColdPairs) {
    pair(r.cold);
  }
  const auto start = Clock::now();
  while (static_cast<int>(r.steady.ratio.size()) < kMinSteadyPairs ||
         (seconds_since(start) < budget_s && r.steady.ratio.size() < 500)) {
    pair(r.steady);
  }
  return r;
}

double gflops(std::int64_t n, double seconds) {
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
         seconds * 1e-9;
}

void write_list(std::FILE* f, const std::vector<double>& v, double scale) {
  std::fputc('[', f);
  for (std::size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%.4f", i ? ", " : "", v[i] * scale);
  std::fputc(']', f);
}

bool write_json(const std::string& path, const std::string& openblas,
                const std::vector<SizeResult>& results) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "eventide_bench_matmul: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::fprintf(f, "{\n  \"openblas\": \"%s\",\n  \"results\": {\n", openblas.c_str());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const SizeResult& r = results[i];
    const Pairs& s = r.steady;
    std::fprintf(f,
                 "    \"%lld\": {\"pairs\": %zu, \"ours_gflops\": %.2f, \"blas_gflops\": %.2f, "
                 "\"ratio\": %.4f, \"ratio_mean\": %.4f, \"ours_ms\": ",
                 static_cast<long long>(r.n), s.ratio.size(), gflops(r.n, median(s.ours_s)),
                 gflops(r.n, median(s.blas_s)), median(s.ratio), mean(s.ratio));
    write_list(f, s.ours_s, 1e3);
    std::fprintf(f, ", \"blas_ms\": ");
    write_list(f, s.blas_s, 1e3);
    std::fprintf(f, ", \"cold_pairs\": %zu", r.cold.ratio.size());
    if (!r.cold.ratio.empty()) {
      std::fprintf(f, ", \"cold_ratio\": %.4f, \"cold_ours_ms\": ", median(r.cold.ratio));
      write_list(f, r.cold.ours_s, 1e3);
      std::fprintf(f, ", \"cold_blas_ms\": ");
      write_list(f, r.cold.blas_s, 1e3);
    }
    std::fprintf(f, "}%s\n", i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  }\n}\n");
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* quick_env = std::getenv("EVENTIDE_BENCH_QUICK");
  bool quick = quick_env && *quick_env && std::strcmp(quick_env, "0") != 0;
  double budget_s = -1;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strncmp(argv[i], "--seconds=", 10) == 0) {
      budget_s = std::atof(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--out=", 6) == 0) {
      out = argv[i] + 6;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--seconds=S] [--out=FILE]\n", argv[0]);
      return 2;
    }
  }
  if (budget_s < 0) budget_s = quick ? 0.5 : 4.0;

  const std::string openblas = std::string(openblas_get_config()) + ", core " +
                               openblas_get_corename() + ", " +
                               std::to_string(openblas_get_num_threads()) + " threads";
  std::printf("matmul f32, ev::matmul + record + wait vs cblas_sgemm, alternating (%s)\n",
              openblas.c_str());
  std::vector<SizeResult> results;
  for (std::int64_t n : {1024, 2048}) {
    results.push_back(measure(n, budget_s));
    const SizeResult& r = results.back();
    std::printf("  n=%-5lld eventide %7.1f GFLOP/s   cblas %7.1f GFLOP/s   ratio %6.1f%%  "
                "(median of %zu pairs)",
                static_cast<long long>(n), gflops(n, median(r.steady.ours_s)),
                gflops(n, median(r.steady.blas_s)), 100 * median(r.steady.ratio),
                r.steady.ratio.size());
    if (!r.cold.ratio.empty()) {
      std::printf("; before them, %zu pairs with fresh output pages: ratio %.1f%%",
                  r.cold.ratio.size(), 100 * median(r.cold.ratio));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!out.empty() && !write_json(out, openblas, results)) return 1;
  return 0;
}
