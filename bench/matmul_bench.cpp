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
// apart ("cold"); the figure is the steady state after them. The pairs are measured by
// measure/matmul_pairs.cpp, shared with `eventide bench`.
//
// Usage: eventide_bench_matmul [--quick] [--seconds=S] [--out=FILE]
//   (EVENTIDE_BENCH_QUICK=1: --quick). S: steady-state time per size, at least 3 pairs.
// OpenBLAS's kernels depend on its DYNAMIC_ARCH choice (OPENBLAS_CORETYPE overrides it);
// the JSON names the core that ran.
#include <cblas.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

#include "measure/matmul_pairs.hpp"
#include "measure/measure.hpp"

namespace mb = eventide::bench;
using mb::gflops;
using mb::median;
using mb::MatmulPairs;
using mb::Pairs;

namespace {

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// The OpenBLAS this binary links (and eventide then uses too: the instance already loaded).
void linked_sgemm(int n, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

void write_list(std::FILE* f, const std::vector<double>& v, double scale) {
  std::fputc('[', f);
  for (std::size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%.4f", i ? ", " : "", v[i] * scale);
  std::fputc(']', f);
}

bool write_json(const std::string& path, const std::string& openblas,
                const std::vector<MatmulPairs>& results) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "eventide_bench_matmul: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::fprintf(f, "{\n  \"openblas\": \"%s\",\n  \"results\": {\n", openblas.c_str());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const MatmulPairs& r = results[i];
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
  std::vector<MatmulPairs> results;
  for (std::int64_t n : {1024, 2048}) {
    results.push_back(mb::measure_matmul_pairs(n, budget_s, linked_sgemm));
    const MatmulPairs& r = results.back();
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
