// eventide on a GPU beside the raw CUDA calls it replaces, measured in the same process: the
// host cost of events, how fast the host notices the end of GPU work, how accurate op times
// are, and matmul throughput against cuBLASLt called directly (measure/suite_cuda.cpp; the
// same suite as `eventide bench --device cuda:0`).
//
//   eventide_bench_cuda [--quick] [--out=results.json]
//
// Prints a Markdown table (figure | eventide | anchor | goal | met?) and writes every number
// as JSON. Skips, saying so, where there is no GPU.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

#include "measure/suite.hpp"

namespace ev = eventide;
namespace mb = eventide::bench;

int main(int argc, char** argv) {
  mb::SuiteOptions options;
  options.device = ev::Device::cuda(0);
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      options.quick = true;
    } else if (std::strncmp(argv[i], "--out=", 6) == 0) {
      out = argv[i] + 6;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--out=FILE]\n", argv[0]);
      return 2;
    }
  }
  if (!ev::is_available(options.device)) {
    std::printf("eventide_bench_cuda: no CUDA device here: skipped\n");
    return 0;
  }
  ev::DeviceInfo info = ev::device_info(options.device);
  std::printf("%s: %s\n\n", info.name.c_str(), info.description.c_str());
  std::fflush(stdout);

  std::vector<mb::Figure> figures;
  try {
    for (const mb::Benchmark& b : mb::cuda_suite(options)) {
      std::fprintf(stderr, "eventide_bench_cuda: %s\n", b.name.c_str());
      figures.push_back(b.run());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eventide_bench_cuda: %s\n", e.what());
    return 1;
  }
  std::fputs(mb::markdown_table(figures).c_str(), stdout);

  if (!out.empty()) {
    std::FILE* f = std::fopen(out.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "eventide_bench_cuda: cannot write %s\n", out.c_str());
      return 1;
    }
    std::fprintf(f, "{\n");
    for (std::size_t i = 0; i < figures.size(); ++i) {
      std::fprintf(f, "  \"%s\": {", figures[i].name.c_str());
      const char* sep = "";
      for (const auto& [key, value] : figures[i].values) {
        std::fprintf(f, "%s\"%s\": %.6g", sep, key.c_str(), value);
        sep = ", ";
      }
      std::fprintf(f, "}%s\n", i + 1 < figures.size() ? "," : "");
    }
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
  return 0;
}
