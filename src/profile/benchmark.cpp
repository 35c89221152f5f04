// benchmark(): timed runs between markers (eventide/benchmark.hpp). Nothing here holds a
// runtime lock while `fn`, the progress sink or the wait hook runs: they are called from this
// plain loop, between public API calls.
#include "eventide/benchmark.hpp"
#include "eventide/graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"

namespace eventide {

namespace {

using Micros = std::chrono::duration<double, std::micro>;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kProgressEvery{200};

void check_options(const BenchmarkOptions& o) {
  if (o.n_repeat < 1) {
    throw InvalidArgument("benchmark: n_repeat must be at least 1, got " + std::to_string(o.n_repeat));
  }
  if (o.n_warmup < 0) {
    throw InvalidArgument("benchmark: n_warmup must be at least 0, got " + std::to_string(o.n_warmup));
  }
  if (o.max_duration && !(o.max_duration->count() >= 0)) {
    throw InvalidArgument("benchmark: max_duration must be a non-negative time, got " +
                          std::to_string(o.max_duration->count()) + " s");
  }
}

double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

std::string format(const char* fmt, double a, double b, double c, double d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

std::string column(std::string_view label, const BenchmarkStats& s) {
  return std::string(label) + ":" +
         format(" %10.3f us +/- %8.3f (min: %10.3f / max: %10.3f) us", s.mean.count(),
                s.stdev.count(), s.min.count(), s.max.count());
}

// The progress line, shown once it is asked for and then refreshed every kProgressEvery.
class ProgressLine {
 public:
  ProgressLine(const BenchmarkOptions& o, std::string name, Clock::time_point start)
      : options_(o), name_(std::move(name)), start_(start) {}

  void update(int done, int total) {
    if (options_.progress == BenchmarkProgress::never) return;
    const auto now = Clock::now();
    if (!shown_ && options_.progress == BenchmarkProgress::automatic &&
        now - start_ < options_.progress_after) {
      return;
    }
    if (shown_ && now - last_ < kProgressEvery && done < total) return;
    shown_ = true;
    last_ = now;
    emit(line(done, total, now), false);
  }

  void finish(int done, int total) {
    if (!shown_) return;
    emit(line(done, total, Clock::now()), true);
  }

 private:
  std::string line(int done, int total, Clock::time_point now) const {
    const double seconds = std::chrono::duration<double>(now - start_).count();
    char buf[64];
    std::snprintf(buf, sizeof buf, ": run %d/%d, %.1f s", done, total, seconds);
    return name_ + buf;
  }
  void emit(const std::string& text, bool last) const {
    if (options_.progress_sink) {
      options_.progress_sink(text, last);
    } else {
      std::fprintf(stderr, "\r%s%s", text.c_str(), last ? "\n" : "");
      std::fflush(stderr);
    }
  }

  const BenchmarkOptions& options_;
  std::string name_;
  Clock::time_point start_;
  Clock::time_point last_{};
  bool shown_ = false;
};

// A stream of the device and how many Works it had (StreamState::enqueued).
struct StreamAt {
  std::shared_ptr<detail::StreamState> stream;
  std::uint64_t enqueued;
};

std::vector<StreamAt> streams_of(Device device) {
  std::vector<StreamAt> out;
  for (auto& s : detail::Runtime::get().context(device).live_streams()) {
    const std::uint64_t n = s->enqueued();
    out.push_back(StreamAt{std::move(s), n});
  }
  return out;
}

// The end of a run: a marker on the current stream, and on every other stream of the device
// that has had work enqueued since `at_start` (one made meanwhile included).
std::vector<Event> ends_of_run(Device device, const std::vector<StreamAt>& at_start) {
  const Stream current = Stream::current(device);
  std::vector<Event> ends;
  Event end(device);
  end.record(current);
  ends.push_back(std::move(end));
  for (auto& s : detail::Runtime::get().context(device).live_streams()) {
    if (s == current.state()) continue;
    auto was = std::find_if(at_start.begin(), at_start.end(), [&](const StreamAt& a) { return a.stream == s; });
    if (was != at_start.end() && s->enqueued() == was->enqueued) continue;  // nothing new there
    Event e(device);
    e.record(Stream(s));
    ends.push_back(std::move(e));
  }
  return ends;
}

}  // namespace

BenchmarkStats summarize(const std::vector<Micros>& times) {
  if (times.empty()) throw InvalidArgument("benchmark: no times to summarize");
  std::vector<double> v;
  v.reserve(times.size());
  for (Micros t : times) v.push_back(t.count());
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  const double stdev = v.size() > 1 ? std::sqrt(squares / static_cast<double>(v.size() - 1)) : 0.0;
  return BenchmarkStats{Micros(mean), Micros(stdev), Micros(v.front()), Micros(percentile(v, 0.5)),
                        Micros(percentile(v, 0.99)), Micros(v.back())};
}

std::string BenchmarkResult::str() const {
  if (host_times.empty()) return name + " : no runs";
  // "host" and "device (cpu)": on the CPU, "CPU" and "cpu" told them apart by case alone.
  return name + " : " + column("host", host_stats()) + "    " +
         column("device (" + device.str() + ")", device_stats());
}

BenchmarkResult benchmark(const std::function<void()>& fn, const BenchmarkOptions& options) {
  check_options(options);
  if (!fn) throw InvalidArgument("benchmark: the function is empty");
  BenchmarkResult result;
  result.name = options.name.empty() ? "benchmark" : options.name;
  result.device = options.device ? *options.device : default_device();
  result.n_warmup = options.n_warmup;
  auto wait = [&](const Event& e) { options.wait ? options.wait(e) : e.wait(); };
  Graph graph;
  if (options.graph) {
    Capture capture(result.device);
    fn();
    graph = capture.end();
  }
  auto call = [&] {
    if (options.graph) {
      (void)graph.replay();
    } else {
      fn();
    }
  };

  // Warm-up: the same calls, their work waited for, nothing kept.
  for (int i = 0; i < options.n_warmup; ++i) {
    const std::vector<StreamAt> at_start = streams_of(result.device);
    call();
    for (const Event& e : ends_of_run(result.device, at_start)) wait(e);
  }

  const auto start = Clock::now();
  ProgressLine progress(options, result.name, start);
  // Room for the runs up to a bound: with max_duration, n_repeat may be far more than will
  // run (10**9 reserved 16 GB before fn was called once); past it the vectors grow.
  constexpr std::size_t kReservedRuns = 1 << 16;
  const auto room = std::min<std::size_t>(static_cast<std::size_t>(options.n_repeat), kReservedRuns);
  result.host_times.reserve(room);
  result.device_times.reserve(room);
  for (int i = 0; i < options.n_repeat; ++i) {
    if (i > 0 && options.max_duration && Clock::now() - start >= *options.max_duration) break;
    // Where each stream of the device stood: a run covers the work `fn` enqueues on any of
    // them (a stream of its own, `with ev.stream(s):`), not only on the current one, whose
    // markers alone read 40 µs for 35 ms of work still running, and missed its failures.
    const std::vector<StreamAt> at_start = streams_of(result.device);
    // The stream is looked up each run: `fn` may change what is current.
    Event before(result.device);
    before.record(Stream::current(result.device));
    const auto t0 = Clock::now();
    call();
    const auto t1 = Clock::now();
    std::vector<Event> ends = ends_of_run(result.device, at_start);
    for (const Event& e : ends) wait(e);  // raises the error of failed work before the end
    before.wait();  // raises its error if it failed
    Micros device_time{0};
    for (const Event& e : ends) device_time = std::max(device_time, std::chrono::duration_cast<Micros>(before.elapsed_time(e)));
    result.host_times.push_back(std::chrono::duration_cast<Micros>(t1 - t0));
    result.device_times.push_back(device_time);
    progress.update(i + 1, options.n_repeat);
  }
  progress.finish(static_cast<int>(result.host_times.size()), options.n_repeat);
  return result;
}

}  // namespace eventide
