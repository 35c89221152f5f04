// tools/measure/suite.hpp: eventide's headline figures, each beside its anchor measured in the
// same process, as a list of named benchmarks that a program runs one by one
// (`eventide bench`, eventide_bench_cuda).
//
//   auto suite = eventide::bench::suite_for({.device = ev::Device::cpu(), .quick = true});
//   for (const Benchmark& b : suite) figures.push_back(b.run());
//   std::fputs(markdown_table(figures).c_str(), stdout);
//
// A benchmark's name is what `--filter` matches ("event.poll", "matmul.f32.n1024"); its
// figure holds eventide's value, the anchors' values and the project's goal. Benchmarks run
// one at a time on the calling thread (each starts and joins its own helper threads) and
// throw what the measurement threw (eventide's errors, std::runtime_error from CUDA calls).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

namespace eventide::bench {

// What a figure's numbers are: times (less is better) or throughput (more is better).
enum class Unit { ns, gflops, tflops };

bool lower_is_better(Unit unit);
// "4.6 ns", "1.19 µs", "238.1 GFLOP/s".
std::string format_value(Unit unit, double value);

// One bar of the chart: a measured value (the p50 for times) and, for times, its p99.
struct Bar {
  std::string label;  // "eventide", "std::condition_variable", "cudaEventQuery"
  double value = 0;
  std::optional<double> p99;
};

struct Figure {
  std::string name;   // the benchmark's name
  std::string title;  // "`Event::poll()` of a finished event" (Markdown)
  Unit unit = Unit::ns;
  bool show_p99 = false;       // the title names "p50 / p99" (the table and chart show a
                               // bar's p99 wherever it has one)
  Bar ours;
  std::vector<Bar> anchors;    // the first is the anchor the goal is read against
  std::string goal;            // "≤ 20 ns", "≥ 95% of cblas_sgemm", "-"
  std::optional<double> goal_value;  // the goal in the figure's unit, for the chart
  std::optional<bool> met;     // none: no goal
  std::optional<double> ratio; // ours / anchor where measured in pairs (matmul), as a fraction
  std::string note;            // what ran, where it matters ("OpenBLAS SkylakeX kernels")
  std::map<std::string, double> values;  // every number measured, for the JSON
};

struct Benchmark {
  std::string name;
  std::string what;       // a few words, for progress lines
  double estimate_s = 1;  // expected run time, for the estimate of the time left
  std::function<Figure()> run;
};

struct SuiteOptions {
  Device device = Device::cpu();
  bool quick = false;  // fewer rounds and smaller matrices: a run of ~10 s on 2 cores
};

// The CPU backend's figures (device: the CPU).
std::vector<Benchmark> cpu_suite(const SuiteOptions& options);
// The CUDA backend's figures (device: a GPU). Built only with the CUDA backend.
std::vector<Benchmark> cuda_suite(const SuiteOptions& options);
// Whether this build can measure `device` (has its backend's suite).
bool has_suite(Device device);
// cpu_suite or cuda_suite by options.device; std::invalid_argument if this build has none.
std::vector<Benchmark> suite_for(const SuiteOptions& options);

// A bar of times (ns): the p50 of `samples`, and their p99.
Bar time_bar(std::string label, const std::vector<double>& samples);
// A figure of times (ns): `ours` (labelled "eventide") beside `anchors`; `goal` as the table
// writes it, `met` whether it was (none: no goal), `goal_ns` where the chart draws it. The
// JSON values are each bar's p50 and p99.
Figure time_figure(std::string name, std::string title, Bar ours, std::vector<Bar> anchors,
                   std::string goal, std::optional<bool> met, std::optional<double> goal_ns,
                   bool show_p99);

// figure | eventide | anchor | goal | met? (Markdown), one row per figure, then a line saying
// how many goals were met. A bar with a p99 reads "p50 / p99".
std::string markdown_table(const std::vector<Figure>& figures);

}  // namespace eventide::bench
