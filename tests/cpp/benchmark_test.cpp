// benchmark(): warm-up and timed runs, host and device time from markers on the current
// stream, statistics, the progress line, and errors.
#include "eventide/benchmark.hpp"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace eventide_test;
using Micros = std::chrono::duration<double, std::micro>;

TEST(BenchmarkTest, RunsWarmupThenTimedRunsAndTimesEach) {
  run_with_deadline([] {
    int calls = 0;
    ev::BenchmarkResult r = ev::benchmark([&] { ++calls; }, {.n_repeat = 5, .n_warmup = 2, .name = "count"});
    EXPECT_EQ(calls, 7);
    EXPECT_EQ(r.host_times.size(), 5u);
    EXPECT_EQ(r.device_times.size(), 5u);
    EXPECT_EQ(r.n_warmup, 2);
    EXPECT_EQ(r.name, "count");
    EXPECT_EQ(r.device, ev::Device::cpu());
  });
}

TEST(BenchmarkTest, DeviceTimeCoversTheStreamsWorkAndHostTimeOnlyTheCall) {
  run_with_deadline([] {
    ev::Stream s = ev::Stream::current(ev::Device::cpu());
    ev::BenchmarkResult r = ev::benchmark(
        [&] { s.enqueue("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }); },
        {.n_repeat = 4, .n_warmup = 1});
    ev::BenchmarkStats device = r.device_stats();
    ev::BenchmarkStats host = r.host_stats();
    EXPECT_GE(device.min, Micros(9000));
    EXPECT_LT(device.max, Micros(2'000'000));
    EXPECT_LT(host.mean, device.mean);
  });
}

TEST(BenchmarkTest, StatisticsMatchTheirDefinitions) {
  std::vector<Micros> times{Micros(4), Micros(1), Micros(3), Micros(2)};
  ev::BenchmarkStats s = ev::summarize(times);
  EXPECT_DOUBLE_EQ(s.mean.count(), 2.5);
  EXPECT_DOUBLE_EQ(s.min.count(), 1);
  EXPECT_DOUBLE_EQ(s.max.count(), 4);
  EXPECT_DOUBLE_EQ(s.p50.count(), 2.5);
  EXPECT_DOUBLE_EQ(s.p99.count(), 3.97);
  EXPECT_NEAR(s.stdev.count(), 1.2909944, 1e-6);
  EXPECT_THROW(ev::summarize({}), ev::InvalidArgument);
}

TEST(BenchmarkTest, StrNamesHostThenDeviceTime) {
  run_with_deadline([] {
    ev::BenchmarkResult r = ev::benchmark([] {}, {.n_repeat = 2, .n_warmup = 0, .name = "noop"});
    const std::string text = r.str();
    // "host" and "device (cpu)": "CPU" and "cpu" told them apart by case alone.
    EXPECT_EQ(text.rfind("noop : host: ", 0), 0u) << text;
    EXPECT_NE(text.find("    device (cpu): "), std::string::npos) << text;
    EXPECT_EQ(text.find("CPU"), std::string::npos) << text;
    EXPECT_NE(text.find("us +/-"), std::string::npos) << text;
    // One line, no line end: printed with one ("\n", Python's print), as the README does.
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  });
}

TEST(BenchmarkTest, BadOptionsAreInvalidArguments) {
  EXPECT_THROW(ev::benchmark([] {}, {.n_repeat = 0}), ev::InvalidArgument);
  EXPECT_THROW(ev::benchmark([] {}, {.n_warmup = -1}), ev::InvalidArgument);
  EXPECT_THROW(ev::benchmark([] {}, {.max_duration = std::chrono::duration<double>(-1)}),
               ev::InvalidArgument);
  EXPECT_THROW(ev::benchmark(std::function<void()>(), {}), ev::InvalidArgument);
}

TEST(BenchmarkTest, AnExceptionFromTheFunctionPropagates) {
  run_with_deadline([] {
    int calls = 0;
    auto fn = [&] {
      if (++calls == 3) throw std::runtime_error("third");
    };
    EXPECT_THROW(ev::benchmark(fn, {.n_repeat = 10, .n_warmup = 1}), std::runtime_error);
    EXPECT_EQ(calls, 3);
  });
}

TEST(BenchmarkTest, MaxDurationEndsTheRunsEarly) {
  run_with_deadline([] {
    ev::Stream s = ev::Stream::current(ev::Device::cpu());
    ev::BenchmarkResult r = ev::benchmark(
        [&] { s.enqueue("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }); },
        {.n_repeat = 100000, .n_warmup = 0, .max_duration = std::chrono::milliseconds(50)});
    EXPECT_GE(r.host_times.size(), 1u);
    EXPECT_LT(r.host_times.size(), 100u);
  });
}

TEST(BenchmarkTest, ProgressGoesToTheSinkOnlyWhenAskedOrLong) {
  run_with_deadline([] {
    std::vector<std::pair<std::string, bool>> lines;
    auto sink = [&](std::string_view line, bool last) { lines.emplace_back(line, last); };
    ev::benchmark([] {}, {.n_repeat = 3, .n_warmup = 0, .name = "quiet", .progress_sink = sink});
    EXPECT_TRUE(lines.empty());
    ev::benchmark([] {}, {.n_repeat = 3, .n_warmup = 0, .name = "asked",
                          .progress = ev::BenchmarkProgress::always, .progress_sink = sink});
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back().first.rfind("asked: run 3/3", 0), 0u) << lines.back().first;
    EXPECT_TRUE(lines.back().second);
    lines.clear();
    ev::Stream s = ev::Stream::current(ev::Device::cpu());
    auto sleep = [&] { s.enqueue("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }); };
    ev::benchmark(sleep, {.n_repeat = 100000, .n_warmup = 0,
                          .max_duration = std::chrono::milliseconds(300), .name = "long",
                          .progress_after = std::chrono::milliseconds(100), .progress_sink = sink});
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(lines.back().second);
    lines.clear();
    ev::benchmark(sleep, {.n_repeat = 100000, .n_warmup = 0,
                          .max_duration = std::chrono::milliseconds(300), .name = "off",
                          .progress = ev::BenchmarkProgress::never,
                          .progress_after = std::chrono::milliseconds(100), .progress_sink = sink});
    EXPECT_TRUE(lines.empty());
  });
}

}  // namespace
