// The commands of the `eventide` program, one per source file; main.cpp parses argv (CLI11)
// and calls them. Each returns the process exit status and writes its results to stdout,
// errors and progress to stderr.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

namespace eventide::cli {

// Exit statuses: 0 success, 1 something the command checked went wrong, 2 bad usage (the
// usual convention of command-line tools, so scripts can tell "wrong call" from "failed").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// The whole program: parses argv (CLI11), runs the command it names and returns the exit
// status (main.cpp). The `eventide` program's main() is this call alone (program.cpp); the
// Python package's `eventide` script and `python -m eventide` make the same call
// (python/src/cli.cpp). argv[0] is the program's name.
int run_command_line(int argc, char** argv);

struct DemoOptions {
  Device device;
  // Where to save the profile of the whole demo (it then runs under an ev::Profiler): a
  // Chrome trace (Perfetto, chrome://tracing) and a self-contained timeline page.
  std::optional<std::string> trace_path;
  std::optional<std::string> timeline_path;
  // The scenarios to run, by number (1-based, as printed); empty: all of them.
  std::vector<int> only;
};

// How many scenarios the demo has (`--only` takes numbers from 1 to this), and the title of
// scenario `number` (1-based, as printed), for `demo --help` and `demo --list`.
int demo_scenario_count();
std::string demo_scenario_title(int number);

// Runs every scenario of the torch.mps.Event tutorial on `options.device`, printing what happened;
// kExitOk when every scenario passed its checks (and the profile, if asked for, was saved).
int run_demo(const DemoOptions& options);

// Lists the devices, the default device and the version.
int run_info();

struct BenchOptions {
  Device device;
  bool quick = false;
  std::optional<std::string> filter;   // ECMAScript regex, searched in each benchmark's name
  // Where bench.json, bench.md and bench.svg go; none: kDefaultBenchDir, in the current folder.
  std::optional<std::string> out_dir;
  // A bench.json to draw the table and chart from again, instead of measuring.
  std::optional<std::string> from;
  bool list = false;                   // list the benchmarks that would run, run nothing
  std::string command_line;            // as typed, for the report
};

inline constexpr const char* kDefaultBenchDir = "eventide-bench";

// Runs the benchmark suite of `options.device` (each figure beside its anchor, in this
// process), with a progress bar on stderr; prints the table and writes the files. kExitOk
// when every benchmark ran (goals missed are figures, not failures), kExitUsage when the
// filter matches none, kExitFailed when a benchmark threw or a file could not be written.
// With `options.from`, measures nothing: reads that bench.json and writes the table and the
// chart of that run (kExitFailed if it cannot be read or is not a bench.json).
int run_bench(const BenchOptions& options);

struct TraceMergeOptions {
  std::string output;               // -o/--output: never taken from the positional names
  std::vector<std::string> inputs;  // Chrome traces of eventide's profiler, one per rank
};

// Merges the Chrome traces of several processes of one job (one per rank) into one, on one
// clock, their processes renumbered and sorted by rank (trace.cpp says how). kExitOk when
// written; kExitUsage, writing nothing, when the output is one of the inputs (the same file,
// by device and inode); kExitFailed, naming the file, for an input that cannot be read, is
// not JSON, is not a trace of eventide's profiler, or has the rank of another input, or an
// output that cannot be written. No input is ever written to.
int run_trace_merge(const TraceMergeOptions& options);

}  // namespace eventide::cli
