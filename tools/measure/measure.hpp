// tools/measure/measure.hpp: the timing helpers that every eventide benchmark shares (the
// benchmark binaries in bench/ and `eventide bench`), so that a figure means the same thing
// wherever it is printed.
//
// Times are nanoseconds as doubles, taken on std::chrono::steady_clock (one clock for every
// core, so a time stamped on one thread can be subtracted from one stamped on another).
// Nothing here is thread-safe unless it says so; every function blocks only as long as the
// measurement it runs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace eventide::bench {

using Clock = std::chrono::steady_clock;

// The steady clock in nanoseconds, for stamps taken on one thread and read on another.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline double ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Busy-waits `d` (for work that must hold its core, as a GPU kernel or a BLAS thread would).
void spin_for(std::chrono::nanoseconds d);

// A distribution of samples: medians and tails are what a wake-up or a call is judged by.
struct Dist {
  std::size_t n = 0;
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

// Throws std::invalid_argument for an empty sample (a measurement that took none is a bug).
Dist dist(std::vector<double> samples);

// The median of `v` (the mean of the middle two for an even count). Non-empty `v`.
double median(std::vector<double> v);

// The host cost of one call of `fn`: `batches` batches of `per` calls, each batch timed as a
// whole (the clock costs ~20 ns, more than the calls measured); one sample per batch, in ns
// per call.
template <class F>
std::vector<double> per_call(int batches, int per, F&& fn) {
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per; ++i) fn();
    v.push_back(ns_between(t0, Clock::now()) / per);
  }
  return v;
}

// Keeps one core busy for its lifetime: a thread spinning, as OpenBLAS's threads do for a
// while after each call. On a 2-core machine two other threads then share the second core,
// and whoever spins while waiting holds up the thread it waits for.
class BusyCore {
 public:
  BusyCore();
  ~BusyCore();
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace eventide::bench
