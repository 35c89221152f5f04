// `eventide bench`: the suite of tools/measure/ (each figure beside its anchor, measured in
// this process, in this run) with a progress bar on stderr; then the table on stdout, and
// bench.json, bench.md and bench.svg in --out (default ./eventide-bench). `--from FILE`
// redraws bench.md and bench.svg from a bench.json instead of measuring.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.hpp"
#include "cli.hpp"
#include "measure/suite.hpp"
#include "progress.hpp"

namespace eventide::cli {

namespace {

namespace fs = std::filesystem;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "0.52 0.31 0.20": the load averages of /proc/loadavg.
std::string load_average() {
  std::string line = read_first_line("/proc/loadavg");
  std::size_t cut = 0;
  for (int fields = 0; fields < 3 && cut != std::string::npos; ++fields) {
    cut = line.find(' ', cut ? cut + 1 : 0);
  }
  return cut == std::string::npos ? line : line.substr(0, cut);
}

// "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz, 2 CPUs".
std::string host_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      std::size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  const unsigned cpus = std::thread::hardware_concurrency();
  return (model.empty() ? std::string("unknown CPU") : model) + ", " + std::to_string(cpus) +
         (cpus == 1 ? " CPU" : " CPUs");
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "eventide bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

// Makes `dir` (and its parents); false, having said why, if it cannot be made.
bool make_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    std::fprintf(stderr, "eventide bench: cannot make the folder %s: %s\n", dir.c_str(),
                 ec ? ec.message().c_str() : "a file of that name exists");
    return false;
  }
  return true;
}

// bench.json (unless `json` is false: it is the input), bench.md and bench.svg, all from `run`.
bool write_reports(const fs::path& dir, bool is_default, const BenchRun& run, bool json) {
  bool written = (!json || write_file(dir / "bench.json", report_json(run))) &&
                 write_file(dir / "bench.md", report_markdown(run)) &&
                 write_file(dir / "bench.svg", report_svg(run));
  if (!written) return false;
  if (json) {
    std::printf("Wrote %s, %s and %s.\n", (dir / "bench.json").c_str(), (dir / "bench.md").c_str(),
                (dir / "bench.svg").c_str());
  } else {
    std::printf("Wrote %s and %s.\n", (dir / "bench.md").c_str(), (dir / "bench.svg").c_str());
  }
  if (is_default) {
    std::error_code ec;
    const fs::path where = fs::absolute(dir, ec);
    std::printf("(The default folder, %s; --out DIR writes elsewhere.)\n",
                (ec ? dir : where).c_str());
  }
  return true;
}

std::string read_file(const fs::path& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *ok = static_cast<bool>(in) || in.eof();
  if (!in.is_open()) *ok = false;
  return text;
}

int redraw(const BenchOptions& options, const fs::path& out_dir, bool is_default) {
  bool ok = false;
  const std::string text = read_file(*options.from, &ok);
  if (!ok) {
    std::fprintf(stderr, "eventide bench: cannot read %s: %s\n", options.from->c_str(),
                 std::strerror(errno));
    return kExitFailed;
  }
  BenchRun run;
  try {
    run = read_report_json(text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eventide bench: %s: %s\n", options.from->c_str(), e.what());
    return kExitFailed;
  }
  if (!make_folder(out_dir)) return kExitFailed;
  std::printf("%s", bench::markdown_table(run.figures).c_str());
  return write_reports(out_dir, is_default, run, false) ? kExitOk : kExitFailed;
}

bool has_named(const std::vector<bench::Benchmark>& suite, const std::string& name) {
  return std::any_of(suite.begin(), suite.end(), [&](const bench::Benchmark& b) { return b.name == name; });
}

// `--list`: the benchmarks of the run asked for, and after them those that the other kind of
// run (full or --quick) makes instead, each of them marked, since the two differ (the quick
// run's matrices are smaller: on the CPU, matmul.f32.n512 instead of n1024 and n2048). `kept`
// says which names the filter kept.
void list_benchmarks(const BenchOptions& options, const std::vector<bench::Benchmark>& suite,
                     const std::function<bool(const std::string&)>& kept) {
  const std::vector<bench::Benchmark> other = bench::suite_for({options.device, !options.quick});
  const char* only_here = options.quick ? "(--quick only)" : "(full run only)";
  const char* only_there = options.quick ? "(full run only)" : "(--quick only)";
  auto line = [](const bench::Benchmark& b, const char* mark) {
    std::printf("%-20s %s%s%s\n", b.name.c_str(), b.what.c_str(), *mark ? "  " : "", mark);
  };
  for (const bench::Benchmark& b : suite) line(b, has_named(other, b.name) ? "" : only_here);
  for (const bench::Benchmark& b : other) {
    if (kept(b.name) && !has_named(suite, b.name)) line(b, only_there);
  }
}

std::string names_of(const std::vector<bench::Benchmark>& suite) {
  std::string names;
  for (const bench::Benchmark& b : suite) names += (names.empty() ? "" : ", ") + b.name;
  return names;
}

}  // namespace

int run_bench(const BenchOptions& options) {
  const bool default_dir = !options.out_dir;
  const fs::path out_dir = options.out_dir ? fs::path(*options.out_dir) : fs::path(kDefaultBenchDir);
  if (options.from) return redraw(options, out_dir, default_dir);
  std::vector<bench::Benchmark> suite;
  try {
    suite = bench::suite_for({options.device, options.quick});
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "eventide bench: %s\n", e.what());
    return kExitUsage;
  }
  const std::regex re(options.filter ? *options.filter : std::string());  // main.cpp checked its syntax
  auto selected = [&](const std::string& name) { return !options.filter || std::regex_search(name, re); };
  if (options.filter) {
    std::vector<bench::Benchmark> kept;
    for (bench::Benchmark& b : suite) {
      if (selected(b.name)) kept.push_back(std::move(b));
    }
    if (kept.empty()) {
      // A filter that selects nothing is a mistake worth stopping for (a typo would otherwise
      // produce an empty table that looks like a result).
      std::fprintf(stderr,
                   "eventide bench: --filter '%s' matches none of the benchmarks on %s (%s)\n",
                   options.filter->c_str(), options.device.str().c_str(),
                   names_of(bench::suite_for({options.device, options.quick})).c_str());
      return kExitUsage;
    }
    suite = std::move(kept);
  }
  if (options.list) {
    list_benchmarks(options, suite, selected);
    return kExitOk;
  }
  // Make the output folder first: finding out it cannot be written after the run would waste it.
  if (!make_folder(out_dir)) return kExitFailed;

  BenchRun run;
  run.version = std::string(version());
  run.device = options.device.str();
  const DeviceInfo info = device_info(options.device);
  run.device_name = info.name;
  run.device_description = info.description;
  run.host = host_description();
  run.quick = options.quick;
  run.filter = options.filter;
  run.command_line = options.command_line;
  run.date = utc_now();
  run.load_before = load_average();

  std::printf("eventide %s bench on %s%s: %zu benchmark%s%s\n", run.version.c_str(),
              run.device.c_str(), run.device_name == run.device ? "" : (" (" + run.device_name + ")").c_str(),
              suite.size(), suite.size() == 1 ? "" : "s", options.quick ? " (quick)" : "");
  std::fflush(stdout);

  std::vector<double> estimates;
  for (const bench::Benchmark& b : suite) estimates.push_back(b.estimate_s);
  Progress progress(stderr, estimates);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < suite.size(); ++i) {
    progress.start(i, suite[i].name, suite[i].what);
    try {
      run.figures.push_back(suite[i].run());
    } catch (const std::exception& e) {
      run.failures.push_back(suite[i].name + ": " + e.what());
    }
    progress.finish();
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.load_after = load_average();
  progress.done(std::to_string(suite.size()) + " benchmark" + (suite.size() == 1 ? "" : "s"));

  std::printf("\n%s", bench::markdown_table(run.figures).c_str());
  for (const std::string& f : run.failures) std::printf("FAILED: %s\n", f.c_str());
  std::printf("Load average before %s, after %s.\n", run.load_before.c_str(), run.load_after.c_str());

  const bool written = write_reports(out_dir, default_dir, run, true);
  return run.failures.empty() && written ? kExitOk : kExitFailed;
}

}  // namespace eventide::cli
