// What `eventide bench` writes: the run as JSON (every number), as Markdown (the table of
// ours beside the anchors) and as an SVG bar chart (self-contained: no scripts, fonts or
// links; it goes into docs/PERFORMANCE.md). Pure functions of the run; no I/O.
//
// The table and the chart are drawn from the same BenchRun, and read_report_json gives back
// the BenchRun of a bench.json, so `eventide bench --from bench.json` redraws both from one
// file: what the docs show side by side always comes from one run. Times are drawn as a bar
// to the p50 and a whisker to the p99, and the table writes them "p50 / p99".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "measure/suite.hpp"

namespace eventide::cli {

struct BenchRun {
  std::string version;             // eventide's
  std::string device;              // "cpu", "cuda:0"
  std::string device_name;         // "cpu", "NVIDIA H200"
  std::string device_description;  // from device_info: cores, BLAS, memory
  std::string host;                // "Intel(R) Xeon(R) ..., 2 CPUs"
  bool quick = false;
  std::optional<std::string> filter;
  std::string command_line;
  std::string date;                // ISO 8601, UTC
  std::string load_before, load_after;  // /proc/loadavg's three figures
  double seconds = 0;              // the whole run
  std::vector<bench::Figure> figures;
  std::vector<std::string> failures;  // "<benchmark>: <what it threw>"
};

std::string report_json(const BenchRun& run);
std::string report_markdown(const BenchRun& run);
std::string report_svg(const BenchRun& run);

// The run that report_json wrote (fields it lacks keep BenchRun's defaults). Throws
// std::runtime_error naming the field when the text is not such a JSON.
BenchRun read_report_json(const std::string& text);

}  // namespace eventide::cli
