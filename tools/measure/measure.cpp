#include "measure.hpp"

#include <algorithm>
#include <stdexcept>

namespace eventide::bench {

void spin_for(std::chrono::nanoseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) cpu_relax();
}

Dist dist(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("dist: no samples");
  std::sort(samples.begin(), samples.end());
  Dist d;
  d.n = samples.size();
  d.p50 = samples[d.n / 2];
  d.p99 = samples[std::min(d.n - 1, d.n * 99 / 100)];
  d.min = samples.front();
  d.max = samples.back();
  double sum = 0;
  for (double x : samples) sum += x;
  d.mean = sum / static_cast<double>(d.n);
  return d;
}

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median: no samples");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

BusyCore::BusyCore()
    : thread_([this] {
        while (!stop_.load(std::memory_order_relaxed)) cpu_relax();
      }) {}

BusyCore::~BusyCore() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

}  // namespace eventide::bench
