// The CPU suite, the formatting shared by every suite, and the choice of suite by device.
#include "suite.hpp"

#include <cstdio>
#include <future>
#include <stdexcept>

#include "matmul_pairs.hpp"
#include "measure.hpp"
#include "wakeups.hpp"

#include "eventide/graph.hpp"

namespace ev = eventide;
using namespace std::chrono_literals;

namespace eventide::bench {

bool lower_is_better(Unit unit) { return unit == Unit::ns; }

std::string format_value(Unit unit, double value) {
  char buf[48];
  switch (unit) {
    case Unit::ns:
      if (value < 100) {
        std::snprintf(buf, sizeof buf, "%.1f ns", value);
      } else if (value < 1e3) {
        std::snprintf(buf, sizeof buf, "%.0f ns", value);
      } else if (value < 1e6) {
        std::snprintf(buf, sizeof buf, "%.2f µs", value / 1e3);
      } else {
        std::snprintf(buf, sizeof buf, "%.2f ms", value / 1e6);
      }
      break;
    case Unit::gflops:
      std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", value);
      break;
    case Unit::tflops:
      std::snprintf(buf, sizeof buf, "%.1f TFLOP/s", value);
      break;
  }
  return buf;
}

Bar time_bar(std::string label, const std::vector<double>& samples) {
  Dist d = dist(samples);
  return Bar{std::move(label), d.p50, d.p99};
}

Figure time_figure(std::string name, std::string title, Bar ours, std::vector<Bar> anchors,
                   std::string goal, std::optional<bool> met, std::optional<double> goal_ns,
                   bool show_p99) {
  Figure f;
  f.name = std::move(name);
  f.title = std::move(title);
  f.unit = Unit::ns;
  f.show_p99 = show_p99;
  f.ours = std::move(ours);
  f.ours.label = "eventide";
  f.anchors = std::move(anchors);
  f.goal = std::move(goal);
  f.goal_value = goal_ns;
  f.met = met;
  // Values for the JSON: "<prefix>_p50", "<prefix>_p99" of each bar.
  auto keep = [&f](const std::string& key, const Bar& b) {
    f.values[key + "_p50"] = b.value;
    if (b.p99) f.values[key + "_p99"] = *b.p99;
  };
  keep("eventide", f.ours);
  for (std::size_t i = 0; i < f.anchors.size(); ++i) {
    keep("anchor" + std::to_string(i), f.anchors[i]);
  }
  return f;
}

namespace {

// A time figure whose goal is "at most `goal_ns`" for the p50 (none: no goal).
Figure time_figure(std::string name, std::string title, Bar ours, std::vector<Bar> anchors,
                   std::optional<double> goal_ns, bool show_p99) {
  std::string goal = "-";
  std::optional<bool> met;
  if (goal_ns) {
    char buf[32];
    if (*goal_ns >= 1e3) {
      std::snprintf(buf, sizeof buf, "≤ %g µs", *goal_ns / 1e3);
    } else {
      std::snprintf(buf, sizeof buf, "≤ %g ns", *goal_ns);
    }
    goal = buf;
    met = ours.value <= *goal_ns;
  }
  return time_figure(std::move(name), std::move(title), std::move(ours), std::move(anchors),
                     std::move(goal), met, goal_ns, show_p99);
}

// Starts the runtime and the CPU device before anything is timed.
void warm_up_cpu() {
  ev::Tensor t = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  t.wait();
}

ev::Tensor finished_scalar() {
  ev::Tensor t = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  t.wait();
  return t;
}

// Rounds and budgets of the CPU suite.
struct CpuSizes {
  int call_batches;   // batches of 100 calls (poll, record)
  int ping_pong;      // rounds of the ping-pongs
  int callbacks;      // back-to-back callbacks
  int sleeping;       // callbacks with their thread asleep (each ~3 ms)
  int op_batches;     // batches of 1000 tiny ops
  int async_batches;  // batches of 20 std::async
  double matmul_s;    // steady-state time per matmul size
};

// Longer than a callback thread's watch after a callback is added (the dispatcher expects
// one for 2 ms, spinning): the thread has really gone to sleep.
constexpr auto kAsleep = 3ms;

}  // namespace

std::vector<Benchmark> cpu_suite(const SuiteOptions& options) {
  if (!options.device.is_cpu()) throw std::invalid_argument("cpu_suite: not a CPU device");
  const CpuSizes z = options.quick ? CpuSizes{2000, 5000, 2000, 100, 40, 40, 2.0}
                                   : CpuSizes{10000, 20000, 10000, 600, 200, 100, 6.0};
  const double q = options.quick ? 1.0 : 4.0;  // rough scale of the estimates
  std::vector<Benchmark> suite;

  suite.push_back({"event.poll", "Event::poll() of a finished event", 0.05 * q, [z] {
    warm_up_cpu();
    ev::Event e;
    e.record(finished_scalar());
    auto ours = per_call(z.call_batches, 100, [&] { (void)e.poll(); });
    std::promise<void> p;
    std::future<void> ready = p.get_future();
    p.set_value();
    auto anchor = per_call(z.call_batches, 100, [&] { (void)ready.wait_for(0s); });
    return time_figure("event.poll", "`Event::poll()` of a finished event, per call",
                       time_bar("eventide", ours),
                       {time_bar("std::future::wait_for(0), ready", anchor)}, 20, false);
  }});

  suite.push_back({"event.record", "Event() + record(tensor) + poll()", 0.2 * q, [z] {
    warm_up_cpu();
    ev::Tensor t = finished_scalar();
    auto ours = per_call(z.call_batches, 100, [&] {
      ev::Event e;
      e.record(t);
      (void)e.poll();
    });
    // The anchor "std::promise set + get, same thread": what a one-shot completion flag
    // from the standard library costs, made, set and read.
    auto anchor = per_call(z.call_batches, 100, [] {
      std::promise<int> p;
      std::future<int> f = p.get_future();
      p.set_value(1);
      (void)f.get();
    });
    return time_figure("event.record", "`Event()` + `record(tensor)` + `poll()`, per call",
                       time_bar("eventide", ours),
                       {time_bar("std::promise + set_value + get", anchor)}, 300, false);
  }});

  suite.push_back({"wake.ping_pong", "UserEvent::set() -> a waiting thread wakes", 0.5 * q, [z] {
    warm_up_cpu();
    auto ours = user_event_ping_pong(z.ping_pong);
    auto condvar = condvar_ping_pong(z.ping_pong);
    auto atomic = atomic_ping_pong(z.ping_pong);
    return time_figure("wake.ping_pong",
                       "`UserEvent::set()` → a waiting thread wakes (ping-pong/2), p50 / p99",
                       time_bar("eventide", ours),
                       {time_bar("std::condition_variable", condvar),
                        time_bar("std::atomic wait/notify", atomic)},
                       5000, true);
  }});

  suite.push_back({"callback.hot", "set() -> a callback runs, back to back", 0.1 * q, [z] {
    warm_up_cpu();
    auto ours = user_event_callback(z.callbacks, 0ns);
    auto anchor = atomic_handoff(z.callbacks, 0ns);
    return time_figure("callback.hot",
                       "`UserEvent::set()` → its callback runs, back to back, p50 / p99",
                       time_bar("eventide", ours),
                       {time_bar("thread in std::atomic wait runs a function", anchor)}, 10000,
                       true);
  }});

  suite.push_back({"callback.idle", "set() -> a callback runs, callback thread asleep",
                   options.quick ? 0.7 : 3.8, [z] {
    warm_up_cpu();
    auto ours = user_event_callback(z.sleeping, kAsleep);
    auto anchor = atomic_handoff(z.sleeping, kAsleep);
    // The anchor is the floor here: waking any thread that has gone to sleep.
    return time_figure("callback.idle",
                       "`UserEvent::set()` → its callback runs, callback thread asleep, p50 / p99",
                       time_bar("eventide", ours),
                       {time_bar("thread asleep in std::atomic wait runs a function", anchor)},
                       10000, true);
  }});

  suite.push_back({"op.enqueue", "a tiny op: Stream::enqueue of an empty function", 0.1 * q, [z] {
    warm_up_cpu();
    ev::Stream s(ev::Device::cpu());
    constexpr int kOps = 1000;
    std::vector<double> ours;
    for (int b = 0; b < z.op_batches; ++b) {
      const auto t0 = Clock::now();
      ev::Event last;
      for (int i = 0; i < kOps; ++i) last = s.enqueue("empty", [] {});
      last.wait();
      ours.push_back(ns_between(t0, Clock::now()) / kOps);
    }
    auto anchor = per_call(z.async_batches, 20, [] {
      auto f = std::async(std::launch::async, [] { return 1; });
      (void)f.get();
    });
    return time_figure("op.enqueue",
                       "a tiny op: `Stream::enqueue` of an empty function, per op (1000, wait "
                       "for the last)",
                       time_bar("eventide", ours), {time_bar("std::async launch + get", anchor)},
                       2000, false);
  }});

  suite.push_back({"op.add", "ev::add of two 1-element tensors", 0.1 * q, [z] {
    warm_up_cpu();
    ev::Stream s(ev::Device::cpu());
    ev::StreamGuard guard(s);
    ev::Tensor a = finished_scalar(), b = finished_scalar();
    constexpr int kOps = 1000;
    std::vector<double> ours;
    for (int batch = 0; batch < z.op_batches; ++batch) {
      const auto t0 = Clock::now();
      ev::Tensor last;
      for (int i = 0; i < kOps; ++i) last = ev::add(a, b);
      last.wait();
      ours.push_back(ns_between(t0, Clock::now()) / kOps);
    }
    auto anchor = per_call(z.async_batches, 20, [] {
      auto f = std::async(std::launch::async, [] { return 1; });
      (void)f.get();
    });
    return time_figure("op.add",
                       "`ev::add` of two 1-element tensors, per op (1000, wait for the last)",
                       time_bar("eventide", ours), {time_bar("std::async launch + get", anchor)},
                       2000, false);
  }});

  suite.push_back({"graph.replay", "replay of a captured chain of 100 tiny adds, per op", 0.1 * q, [z] {
    warm_up_cpu();
    ev::Stream s(ev::Device::cpu());
    ev::StreamGuard guard(s);
    ev::Tensor x = finished_scalar(), one = finished_scalar();
    constexpr int kChain = 100;
    ev::Graph g;
    {
      ev::Capture capture(s);
      for (int i = 0; i < kChain; ++i) ev::add_out(x, x, one);
      g = capture.end();
    }
    // Each round: the chain eagerly, then replayed, waited for alike (the same stream, the
    // same tensors), so both halves see the same machine.
    std::vector<double> eager, replayed;
    for (int round = 0; round < z.op_batches * 5; ++round) {
      auto t0 = Clock::now();
      for (int i = 0; i < kChain; ++i) ev::add_out(x, x, one);
      x.wait();
      eager.push_back(ns_between(t0, Clock::now()) / kChain);
      t0 = Clock::now();
      g.replay(s).wait();
      replayed.push_back(ns_between(t0, Clock::now()) / kChain);
    }
    Bar ours = time_bar("eventide", replayed);
    Bar anchor = time_bar("the same 100 adds issued eagerly", eager);
    const double ratio = ours.value / anchor.value;
    char goal[64];
    std::snprintf(goal, sizeof goal, "≤ 0.5× eager (%.2f×)", ratio);
    return time_figure("graph.replay",
                       "`Graph::replay` of a captured chain of 100 `add_out` on 1-element "
                       "tensors, per op (replay + wait)",
                       std::move(ours), {std::move(anchor)}, goal, ratio <= 0.5, std::nullopt, false);
  }});

  const std::vector<std::int64_t> sizes =
      options.quick ? std::vector<std::int64_t>{512} : std::vector<std::int64_t>{1024, 2048};
  for (std::int64_t n : sizes) {
    const std::string name = "matmul.f32.n" + std::to_string(n);
    const double estimate = z.matmul_s + (n >= 2048 ? 3.0 : 0.5);  // plus cold pairs, inputs
    suite.push_back({name, "matmul f32 n = " + std::to_string(n) + " beside the BLAS", estimate,
                     [z, n, name] {
      warm_up_cpu();
      const LoadedBlas blas = loaded_openblas();
      const MatmulPairs r = measure_matmul_pairs(n, z.matmul_s, blas.sgemm);
      const Pairs& s = r.steady;
      Figure f;
      f.name = name;
      f.title = "`matmul` f32 n = " + std::to_string(n) + " + `record` + `wait`";
      f.unit = Unit::gflops;
      f.ours = Bar{"eventide", gflops(n, median(s.ours_s)), std::nullopt};
      f.anchors = {Bar{"cblas_sgemm, called directly", gflops(n, median(s.blas_s)), std::nullopt}};
      f.ratio = median(s.ratio);
      f.goal = "≥ 95% of cblas_sgemm";
      f.goal_value = 0.95 * f.anchors[0].value;
      f.met = *f.ratio >= 0.95;
      f.note = "OpenBLAS " + blas.core + " kernels on both sides, " +
               std::to_string(blas.threads) + " threads; median of " +
               std::to_string(s.ratio.size()) + " alternating pairs";
      f.values = {{"eventide_gflops", f.ours.value},
                  {"cblas_gflops", f.anchors[0].value},
                  {"ratio", *f.ratio},
                  {"pairs", static_cast<double>(s.ratio.size())},
                  {"cold_pairs", static_cast<double>(r.cold.ratio.size())}};
      if (!r.cold.ratio.empty()) f.values["cold_ratio"] = median(r.cold.ratio);
      return f;
    }});
  }
  return suite;
}

bool has_suite(Device device) {
#if EVENTIDE_BENCH_WITH_CUDA
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

std::vector<Benchmark> suite_for(const SuiteOptions& options) {
  if (options.device.is_cpu()) return cpu_suite(options);
#if EVENTIDE_BENCH_WITH_CUDA
  if (options.device.is_cuda()) return cuda_suite(options);
#endif
  throw std::invalid_argument("this build of eventide has no benchmarks for " +
                              options.device.str() +
                              (options.device.is_cuda() ? " (built without the CUDA backend)" : ""));
}

std::string markdown_table(const std::vector<Figure>& figures) {
  // A bar with a p99 reads "p50 / p99", as the chart draws it (a bar and a whisker).
  auto value_text = [](Unit unit, const Bar& b) {
    std::string s = format_value(unit, b.value);
    if (b.p99) s += " / " + format_value(unit, *b.p99);
    return s;
  };
  std::string out =
      "| figure | eventide | anchor (same run) | goal | met? |\n"
      "| --- | --- | --- | --- | --- |\n";
  int goals = 0, met = 0;
  for (const Figure& f : figures) {
    std::string figure = f.title;
    if (!f.note.empty()) figure += " (" + f.note + ")";
    std::string ours = value_text(f.unit, f.ours);
    if (f.ratio) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " (%.1f%%)", 100 * *f.ratio);
      ours += buf;
    }
    std::string anchors;
    for (const Bar& a : f.anchors) {
      anchors += (anchors.empty() ? "" : " · ") + a.label + " " + value_text(f.unit, a);
    }
    if (anchors.empty()) anchors = "-";
    const char* verdict = !f.met ? "-" : (*f.met ? "yes" : "**no**");
    if (f.met) {
      ++goals;
      met += *f.met ? 1 : 0;
    }
    out += "| " + figure + " | " + ours + " | " + anchors + " | " + f.goal + " | " + verdict + " |\n";
  }
  out += "\nGoals met: " + std::to_string(met) + " of " + std::to_string(goals) + ".\n";
  return out;
}

}  // namespace eventide::bench
