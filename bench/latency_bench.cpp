// bench/latency_bench.cpp: wake-up latency distributions (p50, p99) of eventide's blocking
// paths, beside the standard primitives measured the same way in the same process.
//
// Google Benchmark reports means; a wake-up is judged by its median and its tail, so these
// are measured by hand, as the anchor program of ANCHORS.md ("CPU primitives") does:
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
// Usage: eventide_bench_latency [--quick] [--out=FILE]   (EVENTIDE_BENCH_QUICK=1: --quick)
// Prints a table and, with --out, writes every distribution as JSON for bench/report.py.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <eventide/eventide.hpp>

namespace ev = eventide;

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void spin_for(std::chrono::nanoseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) cpu_relax();
}

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
  std::size_t n = 0;
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

std::vector<Result> g_results;

void report(std::string key, std::string what, std::vector<double> ns) {
  std::sort(ns.begin(), ns.end());
  Result r;
  r.key = std::move(key);
  r.what = std::move(what);
  r.n = ns.size();
  r.p50 = ns[ns.size() / 2];
  r.p99 = ns[ns.size() * 99 / 100];
  r.min = ns.front();
  r.max = ns.back();
  double sum = 0;
  for (double x : ns) sum += x;
  r.mean = sum / static_cast<double>(ns.size());
  std::printf("%-46s p50 %10.1f  p99 %10.1f  ns  (%s)\n", r.key.c_str(), r.p50, r.p99,
              r.what.c_str());
  std::fflush(stdout);
  g_results.push_back(std::move(r));
}

// --- Anchors: the standard primitives --------------------------------------------------------

// Keeps one core busy for its lifetime: a thread spinning, as OpenBLAS's threads do for a
// while after each call. On this 2-core machine the two ping-pong threads then share the
// other core, and whoever spins while waiting holds up the thread it waits for.
class BusyCore {
 public:
  BusyCore()
      : thread_([this] {
          while (!stop_.load(std::memory_order_relaxed)) cpu_relax();
        }) {}
  ~BusyCore() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `suffix`: "" on an otherwise idle machine, ".busy" with a BusyCore.
std::string key(const char* base, const char* suffix) { return std::string(base) + suffix; }
std::string what(const char* base, const char* suffix) {
  return std::string(base) + (*suffix ? ", one core kept busy" : "");
}

void anchor_atomic_ping_pong(int rounds, const char* suffix) {
  std::atomic<int> turn{0};
  std::vector<double> v;
  v.reserve(rounds);
  std::thread peer([&] {
    for (int i = 1; i <= rounds; ++i) {
      int x;
      while ((x = turn.load()) != 2 * i - 1) turn.wait(x);
      turn.store(2 * i);
      turn.notify_one();
    }
  });
  for (int i = 1; i <= rounds; ++i) {
    auto t0 = Clock::now();
    turn.store(2 * i - 1);
    turn.notify_one();
    int x;
    while ((x = turn.load()) != 2 * i) turn.wait(x);
    v.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 2);
  }
  peer.join();
  report(key("anchor.atomic_wait.ping_pong", suffix),
         what("std::atomic wait/notify, ping-pong/2", suffix), std::move(v));
}

void anchor_condvar_ping_pong(int rounds, const char* suffix) {
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  std::vector<double> v;
  v.reserve(rounds);
  std::thread peer([&] {
    for (int i = 1; i <= rounds; ++i) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return turn == 2 * i - 1; });
      turn = 2 * i;
      cv.notify_all();
    }
  });
  for (int i = 1; i <= rounds; ++i) {
    auto t0 = Clock::now();
    {
      std::unique_lock lock(mu);
      turn = 2 * i - 1;
    }
    cv.notify_all();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return turn == 2 * i; });
    v.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 2);
  }
  peer.join();
  report(key("anchor.condvar.ping_pong", suffix),
         what("std::condition_variable, ping-pong/2", suffix), std::move(v));
}

void anchor_spin_ping_pong(int rounds) {
  std::atomic<int> turn{0};
  std::vector<double> v;
  v.reserve(rounds);
  std::thread peer([&] {
    for (int i = 1; i <= rounds; ++i) {
      while (turn.load(std::memory_order_acquire) != 2 * i - 1) cpu_relax();
      turn.store(2 * i, std::memory_order_release);
    }
  });
  for (int i = 1; i <= rounds; ++i) {
    auto t0 = Clock::now();
    turn.store(2 * i - 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * i) cpu_relax();
    v.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 2);
  }
  peer.join();
  report("anchor.spin.ping_pong", "spinning on an atomic, ping-pong/2 (the floor)", std::move(v));
}

// A setter that sleeps `idle` before each set, so the waiter is deep asleep; `wait(i)` blocks
// until round i is set, `set(i)` sets it. Returns set-to-return times.
template <class Wait, class Set>
std::vector<double> sleeping_waiter(int rounds, std::chrono::nanoseconds idle, Wait wait,
                                    Set set) {
  std::vector<std::int64_t> t_set(rounds), t_woke(rounds);
  std::atomic<int> acknowledged{0};
  std::thread waiter([&] {
    for (int i = 0; i < rounds; ++i) {
      wait(i);
      t_woke[i] = now_ns();
      acknowledged.store(i + 1, std::memory_order_release);
    }
  });
  for (int i = 0; i < rounds; ++i) {
    while (acknowledged.load(std::memory_order_acquire) < i) std::this_thread::yield();
    std::this_thread::sleep_for(idle);
    t_set[i] = now_ns();
    set(i);
  }
  waiter.join();
  std::vector<double> v(rounds);
  for (int i = 0; i < rounds; ++i) v[i] = static_cast<double>(t_woke[i] - t_set[i]);
  return v;
}

// `idle`: how long the waiter sleeps; a virtual CPU idle for milliseconds wakes slower than
// one idle for microseconds, so each eventide figure gets the anchor of its own idle time.
void anchor_atomic_sleeping(int rounds, std::chrono::nanoseconds idle, const char* key,
                            const char* what) {
  std::atomic<int> round{0};
  auto v = sleeping_waiter(
      rounds, idle,
      [&](int i) {
        int x;
        while ((x = round.load()) <= i) round.wait(x);
      },
      [&](int i) {
        round.store(i + 1);
        round.notify_one();
      });
  report(key, what, std::move(v));
}

void anchor_condvar_sleeping(int rounds) {
  std::mutex mu;
  std::condition_variable cv;
  int round = 0;
  auto v = sleeping_waiter(
      rounds, kSleep,
      [&](int i) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return round > i; });
      },
      [&](int i) {
        {
          std::lock_guard lock(mu);
          round = i + 1;
        }
        cv.notify_one();
      });
  report("anchor.condvar.sleeping", "std::condition_variable, waiter asleep", std::move(v));
}

// --- eventide ----------------------------------------------------------------------------------

// UserEvent::set() -> Event::wait() returns on the other thread. Every round uses fresh
// events, made before timing starts, so no reset races the waiter.
void user_event_ping_pong(int rounds, const char* suffix) {
  std::vector<ev::UserEvent> ping(rounds), pong(rounds);
  std::vector<double> v;
  v.reserve(rounds);
  std::thread peer([&] {
    for (int i = 0; i < rounds; ++i) {
      ping[i].wait();
      pong[i].set();
    }
  });
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    ping[i].set();
    pong[i].wait();
    v.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 2);
  }
  peer.join();
  report(key("eventide.user_event.ping_pong", suffix),
         what("UserEvent::set -> Event::wait returns, ping-pong/2", suffix), std::move(v));
}

void user_event_sleeping(int rounds) {
  std::vector<ev::UserEvent> events(rounds);
  auto v = sleeping_waiter(
      rounds, kSleep, [&](int i) { events[i].wait(); }, [&](int i) { events[i].set(); });
  report("eventide.user_event.sleeping", "UserEvent::set -> Event::wait returns, waiter asleep",
         std::move(v));
}

// UserEvent::set() -> the first line of a callback on the runtime's callback thread.
// `idle`: sleep before each set, so that thread has gone to sleep; else back to back.
void user_event_callback(int rounds, bool idle) {
  std::atomic<std::int64_t> ran_at{0};
  std::vector<double> v;
  v.reserve(rounds);
  for (int i = 0; i < rounds; ++i) {
    ev::UserEvent u;
    ran_at.store(0, std::memory_order_relaxed);
    u.add_callback([&ran_at] {
      ran_at.store(now_ns(), std::memory_order_release);
      ran_at.notify_one();
    });
    if (idle) std::this_thread::sleep_for(kSleep);
    const std::int64_t t0 = now_ns();
    u.set();
    // Block rather than spin: a spinning host thread could hold the very core the callback
    // thread needs. The time is taken inside the callback, so this wake-up is not in it.
    ran_at.wait(0, std::memory_order_acquire);
    v.push_back(static_cast<double>(ran_at.load(std::memory_order_acquire) - t0));
  }
  if (idle) {
    report("eventide.callback.idle", "UserEvent::set -> callback runs, callback thread asleep",
           std::move(v));
  } else {
    report("eventide.callback.hot", "UserEvent::set -> callback runs, back to back", std::move(v));
  }
}

// The end of an op's body on a stream worker -> Event::wait returns on the host. The body
// spins `body` first, so the host is already waiting: still spinning for a short body, asleep
// for a long one.
void stream_work_wake(int rounds, std::chrono::nanoseconds body, const char* key,
                      const char* what) {
  ev::Stream s(ev::Device::cpu());
  std::atomic<std::int64_t> ended_at{0};
  std::vector<double> v;
  v.reserve(rounds);
  for (int i = 0; i < rounds; ++i) {
    ev::Event e = s.enqueue("timed body", [&ended_at, body] {
      if (body > std::chrono::microseconds(50)) {
        std::this_thread::sleep_for(body);  // leaves the core to the host thread
      } else {
        spin_for(body);
      }
      ended_at.store(now_ns(), std::memory_order_release);
    });
    e.wait();
    const std::int64_t t1 = now_ns();
    v.push_back(static_cast<double>(t1 - ended_at.load(std::memory_order_acquire)));
  }
  report(key, what, std::move(v));
}

// Stream::enqueue -> the op's body starts, on a stream whose worker has gone back to the pool
// (the stream was idle longer than the worker's idle spell).
void idle_stream_pickup(int rounds) {
  ev::Stream s(ev::Device::cpu());
  std::atomic<std::int64_t> started_at{0};
  std::vector<double> v;
  v.reserve(rounds);
  for (int i = 0; i < rounds; ++i) {
    std::this_thread::sleep_for(kWorkerIdle);
    const std::int64_t t0 = now_ns();
    ev::Event e = s.enqueue("stamp", [&started_at] {
      started_at.store(now_ns(), std::memory_order_release);
    });
    e.wait();
    v.push_back(static_cast<double>(started_at.load(std::memory_order_acquire) - t0));
  }
  report("eventide.stream.idle_pickup", "Stream::enqueue -> body starts, worker back in the pool",
         std::move(v));
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
                 json_escape(r.key).c_str(), json_escape(r.what).c_str(), r.n, r.p50, r.p99,
                 r.mean, r.min, r.max, i + 1 < g_results.size() ? "," : "");
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

  anchor_atomic_ping_pong(sizes.ping_pong, "");
  anchor_condvar_ping_pong(sizes.ping_pong, "");
  // Fewer rounds: if another process takes one of the two cores, every pure-spin hand-off
  // waits for a scheduler tick (milliseconds).
  anchor_spin_ping_pong(std::min(sizes.ping_pong, 2000));
  user_event_ping_pong(sizes.ping_pong, "");
  {
    BusyCore busy;
    anchor_atomic_ping_pong(sizes.busy, ".busy");
    anchor_condvar_ping_pong(sizes.busy, ".busy");
    user_event_ping_pong(sizes.busy, ".busy");
  }

  anchor_atomic_sleeping(sizes.sleeping, kSleep, "anchor.atomic_wait.sleeping",
                         "std::atomic wait/notify, waiter asleep 200 us");
  anchor_condvar_sleeping(sizes.sleeping);
  user_event_sleeping(sizes.sleeping);

  user_event_callback(sizes.hot, /*idle=*/false);
  user_event_callback(sizes.sleeping, /*idle=*/true);

  stream_work_wake(sizes.hot, std::chrono::microseconds(5), "eventide.stream_wait.hot",
                   "op body ends on the worker -> Event::wait returns, host spinning");
  stream_work_wake(sizes.sleeping, std::chrono::microseconds(200), "eventide.stream_wait.sleeping",
                   "op body ends on the worker -> Event::wait returns, host asleep");
  anchor_atomic_sleeping(sizes.idle_worker, kWorkerIdle, "anchor.atomic_wait.sleeping_3ms",
                         "std::atomic wait/notify, waiter asleep 3 ms");
  idle_stream_pickup(sizes.idle_worker);

  if (!out.empty() && !write_json(out, sizes, quick)) return 1;
  return 0;
}
