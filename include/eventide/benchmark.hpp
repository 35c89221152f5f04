// eventide/benchmark.hpp: how long a function takes, on the host and on the device.
//
// benchmark(fn) calls `fn` n_warmup times untimed, then up to n_repeat times, each run
// bracketed by two timed markers on the device's current stream:
//
//   start.record(stream); t0 = now(); fn(); t1 = now(); end.record(stream); wait(end)
//
// The run's host time is t1 - t0 (what the call costs the calling thread: enqueueing, not the
// device work), its device time start.elapsed_time(end) (the device's time from the first
// marker to the second: the work `fn` enqueued on that stream, and whatever it waited for
// there). Like a CUDA event pair's (and cupyx.profiler.benchmark's), that span includes the
// time the device waited for the host inside `fn` (launch gaps; a sleep between two
// launches), never host time before the first marker; the ops' own device time alone is an
// Event recorded on their outputs (time_elapsed). Each run waits for its end marker before the next starts, so runs never overlap
// and the device is idle (for this stream) when each begins. Runs stop early once
// `max_duration` of wall time has passed since the first timed run (at least one run is
// always timed). The same on every device: on the CPU the markers are the CPU stream's.
//
// Thread-safety: call it from any thread; `fn` runs on the calling thread, with no runtime
// lock held, and so do the progress sink and the wait hook. Blocks until the last run's work
// has finished. Throws InvalidArgument for n_repeat < 1, n_warmup < 0 or a negative
// max_duration; rethrows what `fn` throws, and the error of failed work the markers waited
// for (as Event::wait does), with no result.
//
// @code
//   auto a = eventide::randn({512, 512}), b = eventide::randn({512, 512});
//   eventide::BenchmarkResult r = eventide::benchmark([&] { eventide::matmul(a, b); },
//                                                     {.n_repeat = 100, .name = "matmul"});
//   std::cout << r.str() << "\n";  // matmul : host: 12.3 us +/- 1.1 (min: ... / max: ...) us  ...
// @endcode
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eventide/device.hpp"
#include "eventide/event.hpp"

namespace eventide {

// When benchmark() writes its progress line.
enum class BenchmarkProgress {
  automatic,  // once the benchmark has run for `progress_after` (long runs only)
  always,     // from the first timed run
  never,
};

struct BenchmarkOptions {
  int n_repeat = 100;  // timed runs (at most: max_duration may end them sooner); >= 1
  int n_warmup = 10;   // untimed runs first; >= 0
  // Wall time after which no further timed run starts; nullopt: none.
  std::optional<std::chrono::duration<double>> max_duration;
  // The device whose current stream gets the markers; nullopt: the default device.
  std::optional<Device> device;
  std::string name;  // for str(); empty: "benchmark"
  // Capture `fn` once into a graph (eventide/graph.hpp), on a stream of the device, and time
  // its replays on the current stream instead of calls of `fn` (triton's do_bench_cudagraph):
  // the device time of work shorter than its launch, without the launch. `fn` must be
  // capturable (no host waits); its capture's error is thrown.
  bool graph = false;
  BenchmarkProgress progress = BenchmarkProgress::automatic;
  std::chrono::duration<double> progress_after = std::chrono::seconds(1);
  // Where the progress line goes: called with the line (no line end) at most about five
  // times a second, and once with `last` true after the final run if a line was shown. Empty:
  // standard error, the line rewritten in place ("\r") and ended with "\n".
  std::function<void(std::string_view line, bool last)> progress_sink;
  // Waits for a run's end marker; empty: end.wait(). (The Python binding waits in slices that
  // Ctrl-C can end.) Must throw the event's error as Event::wait does.
  std::function<void(const Event& end)> wait;
};

// Summary statistics of one column of times.
struct BenchmarkStats {
  using Micros = std::chrono::duration<double, std::micro>;
  Micros mean{}, stdev{}, min{}, p50{}, p99{}, max{};  // stdev: the sample's (n - 1)
};
// InvalidArgument for an empty list. Percentiles interpolate linearly between the nearest
// ranks (NumPy's default).
BenchmarkStats summarize(const std::vector<std::chrono::duration<double, std::micro>>& times);

struct BenchmarkResult {
  using Micros = std::chrono::duration<double, std::micro>;
  std::string name;
  Device device = Device::cpu();
  std::vector<Micros> host_times;    // one per timed run
  std::vector<Micros> device_times;  // one per timed run
  int n_warmup = 0;

  BenchmarkStats host_stats() const { return summarize(host_times); }
  BenchmarkStats device_stats() const { return summarize(device_times); }
  // One line, with no line end (print it with one, as Python's print does): "matmul : host:
  // 12.345 us +/- 1.234 (min: 10.100 / max: 20.200) us    device (cpu): 45.678 us +/- ..."
  // (the host's time of each call, then the device's time between its markers).
  std::string str() const;
};

BenchmarkResult benchmark(const std::function<void()>& fn, const BenchmarkOptions& options = {});

}  // namespace eventide
