// bench/latency_bench.cpp: wake-up latency distributions (p50, p99) of eventide's blocking
// paths, beside the standard primitives measured the same way in the same process.
//
// Google Benchmark reports means; a wake-up is judged by its median and its tail, so these
// are measured by hand, as the anchor programs of the C++ primitives are:
//
// * Ping-pong: two threads hand a turn back and forth through the primitive; half of one
//   round trip is one wake-up. Both threads stay hot, so waiters that spin before they sleep
//   (eventide's Parker, libstdc++'s atomic wait) are caught while spinning. Again with a
//   third thread keeping one of this machine's two cores busy, so that the two share one.
// * Sleeping waiter: the waiter has been blocked for far longer than any spin (the setter
//   sleeps 200 µs first), so the wake-up goes through the kernel; timed from just before the
//   set to just after the waiter returns (steady_clock is one clock for every core).
// * Callbacks and stream work: from just before set() (or the end of an op's body) to the
//   first line of the callback (or the return of Event::wait), hot (back to back) and idle.
//
// The measurements themselves are in measure/wakeups.cpp, shared with `eventide bench`.
//
// Usage: eventide_bench_latency [--quick] [--out=FILE]   (EVENTIDE_BENCH_QUICK=1: --quick)
// Prints a table and, with --out, writes every distribution as JSON for bench/report.py.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

#include "measure/measure.hpp"
#include "measure/wakeups.hpp"

namespace ev = eventide;
namespace mb = eventide::bench;

namespace {

struct Sizes {
  int ping_pong;     // rounds of each ping-pong
  int busy;          // rounds of each ping-pong with one core kept busy (each up to ~50 µs)
  int sleeping;      // rounds with a sleeping waiter (each costs ~250 µs)
  int hot;           // rounds of back-to-back callbacks and stream ops
  int idle_worker;   // rounds that let a stream's worker go back to the pool (each ~3 ms)
};

constexpr auto kSleep = std::chrono::microseconds(200);
// Longer than a CPU stream worker's idle spell (2 ms), after which it leaves its stream.
constexpr auto kWorkerIdle = std::chrono::milliseconds(3);

struct Result {
  std::string key;
  std::string what;
  mb::Dist d;
};

std::vector<Result> g_results;

void report(std::string key, std::string what, std::vector<double> ns) {
  Result r{std::move(key), std::move(what), mb::dist(std::move(ns))};
  std::printf("%-46s p50 %10.1f  p99 %10.1f  ns  (%s)\n", r.key.c_str(), r.d.p50, r.d.p99,
              r.what.c_str());
  std::fflush(stdout);
  g_results.push_back(std::move(r));
}

// `suffix`: "" on an otherwise idle machine, ".busy" with a BusyCore (measure.hpp).
std::string key(const char* base, const char* suffix) { return std::string(base) + suffix; }
std::string what(const char* base, const char* suffix) {
  return std::string(base) + (*suffix ? ", one core kept busy" : "");
}

void ping_pongs(int rounds, const char* suffix) {
  report(key("anchor.atomic_wait.ping_pong", suffix),
         what("std::atomic wait/notify, ping-pong/2", suffix), mb::atomic_ping_pong(rounds));
  report(key("anchor.condvar.ping_pong", suffix),
         what("std::condition_variable, ping-pong/2", suffix), mb::condvar_ping_pong(rounds));
  if (!*suffix) {
    // Fewer rounds: if another process takes one of the two cores, every pure-spin hand-off
    // waits for a scheduler tick (milliseconds).
    report("anchor.spin.ping_pong", "spinning on an atomic, ping-pong/2 (the floor)",
           mb::spin_ping_pong(std::min(rounds, 2000)));
  }
  report(key("eventide.user_event.ping_pong", suffix),
         what("UserEvent::set -> Event::wait returns, ping-pong/2", suffix),
         mb::user_event_ping_pong(rounds));
}

// --- Output ----------------------------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

bool write_json(const std::string& path, const Sizes& sizes, bool quick) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "eventide_bench_latency: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::fprintf(f, "{\n  \"unit\": \"ns\",\n  \"quick\": %s,\n", quick ? "true" : "false");
  std::fprintf(f, "  \"rounds\": {\"ping_pong\": %d, \"busy\": %d, \"sleeping\": %d, "
               "\"hot\": %d, \"idle_worker\": %d},\n", sizes.ping_pong, sizes.busy,
               sizes.sleeping, sizes.hot, sizes.idle_worker);
  std::fprintf(f, "  \"results\": {\n");
  for (std::size_t i = 0; i < g_results.size(); ++i) {
    const Result& r = g_results[i];
    std::fprintf(f,
                 "    \"%s\": {\"what\": \"%s\", \"n\": %zu, \"p50\": %.1f, \"p99\": %.1f, "
                 "\"mean\": %.1f, \"min\": %.1f, \"max\": %.1f}%s\n",
                 json_escape(r.key).c_str(), json_escape(r.what).c_str(), r.d.n, r.d.p50, r.d.p99,
                 r.d.mean, r.d.min, r.d.max, i + 1 < g_results.size() ? "," : "");
  }
  std::fprintf(f, "  }\n}\n");
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* quick_env = std::getenv("EVENTIDE_BENCH_QUICK");
  bool quick = quick_env && *quick_env && std::strcmp(quick_env, "0") != 0;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strncmp(argv[i], "--out=", 6) == 0) {
      out = argv[i] + 6;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--out=FILE]\n", argv[0]);
      return 2;
    }
  }
  const Sizes sizes = quick ? Sizes{5000, 1000, 300, 2000, 60} : Sizes{20000, 5000, 2000, 10000, 300};

  // Start the runtime and the CPU device before timing anything.
  ev::Tensor warm = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  warm.wait();

  ping_pongs(sizes.ping_pong, "");
  {
    mb::BusyCore busy;
    ping_pongs(sizes.busy, ".busy");
  }

  report("anchor.atomic_wait.sleeping", "std::atomic wait/notify, waiter asleep 200 us",
         mb::atomic_sleeping(sizes.sleeping, kSleep));
  report("anchor.condvar.sleeping", "std::condition_variable, waiter asleep",
         mb::condvar_sleeping(sizes.sleeping, kSleep));
  report("eventide.user_event.sleeping", "UserEvent::set -> Event::wait returns, waiter asleep",
         mb::user_event_sleeping(sizes.sleeping, kSleep));

  report("eventide.callback.hot", "UserEvent::set -> callback runs, back to back",
         mb::user_event_callback(sizes.hot, std::chrono::nanoseconds(0)));
  report("eventide.callback.idle", "UserEvent::set -> callback runs, callback thread asleep",
         mb::user_event_callback(sizes.sleeping, kSleep));

  report("eventide.stream_wait.hot",
         "op body ends on the worker -> Event::wait returns, host spinning",
         mb::stream_work_wake(sizes.hot, std::chrono::microseconds(5)));
  report("eventide.stream_wait.sleeping",
         "op body ends on the worker -> Event::wait returns, host asleep",
         mb::stream_work_wake(sizes.sleeping, std::chrono::microseconds(200)));
  report("anchor.atomic_wait.sleeping_3ms", "std::atomic wait/notify, waiter asleep 3 ms",
         mb::atomic_sleeping(sizes.idle_worker, kWorkerIdle));
  report("eventide.stream.idle_pickup", "Stream::enqueue -> body starts, worker back in the pool",
         mb::idle_stream_pickup(sizes.idle_worker, kWorkerIdle));

  if (!out.empty() && !write_json(out, sizes, quick)) return 1;
  return 0;
}
