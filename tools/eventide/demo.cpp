// `eventide demo`: every scenario of the torch.mps.Event tutorial (docs/TUTORIAL.md, points
// 1-12), run for real on one device, then the features eventide adds beyond it.
//
// Each scenario is a function that prints what it does and throws when something is not as
// the tutorial (or API.md) says; the runner catches that, marks the section FAILED and goes on,
// so one broken scenario does not hide the others. The structure of the output is fixed
// (the same sections and lines every run); only the measured numbers change.
//
// Where a scenario must show an order of events ("op 2 is still running when op 1 is done"),
// it holds work back with a UserEvent instead of relying on timing, so that the demo is
// deterministic on any machine. Measured times are printed but only checked where the
// margin is orders of magnitude wide.
//
// Over 600 lines on purpose: it is the demo's catalogue, one function per scenario in the
// tutorial's order, read top to bottom like docs/TUTORIAL.md; the scenarios that have an
// example program run that program's code (examples/cpp/*.hpp) instead of a copy.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "08_custom_event.hpp"
#include "09_multiple_ops_one_event.hpp"
#include "10_user_event_gate.hpp"
#include "cli.hpp"

namespace ev = eventide;

namespace eventide::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Micros = std::chrono::duration<double, std::micro>;

// A scenario's own check failed (eventide's errors are reported as they are).
class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void check(bool condition, const std::string& what) {
  if (!condition) throw CheckFailed(what);
}

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

// One indented line of a scenario's report.
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string line = vformat(fmt, args);
  va_end(args);
  std::printf("    %s\n", line.c_str());
}

// The examples' scenarios (examples/cpp/*.hpp) told as the demo's sections: their lines
// indented, a broken promise this scenario's failure.
class DemoNarrator final : public examples::Narrator {
 public:
  void say(const std::string& line) override { std::printf("    %s\n", line.c_str()); }
  void check(bool kept, const std::string& promise) override { eventide::cli::check(kept, promise); }
};

// Times are printed in microseconds, the tutorial's unit for time_elapsed().
std::string us(Micros t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f µs", t.count());
  return buf;
}
std::string us(Clock::duration t) { return us(std::chrono::duration_cast<Micros>(t)); }

const char* yes_no(bool b) { return b ? "true" : "false"; }

std::string device_or_none(const std::optional<ev::Device>& d) {
  return d ? d->str() : std::string("nullopt");
}

// 2 * n^3 floating-point operations in `t`.
double gflops(std::int64_t n, Micros t) {
  double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return t.count() > 0 ? flops / (t.count() * 1e3) : 0.0;
}

// What the scenarios share: the device, and matrix sizes fitting it. `n` is the tutorial-sized
// matmul; `big_n` one that takes long enough (milliseconds) for asynchrony to be visible.
struct Context {
  ev::Device device;
  std::int64_t n = 512;
  std::int64_t big_n = 1024;

  ev::Tensor randn(std::int64_t size) const {
    return ev::randn({size, size}, ev::DType::f32, device);
  }
};

// "[[ 1.234, -0.567, ...], [...]]": the top-left corner of an n x n result.
std::string corner(const std::vector<float>& m, std::int64_t n, int rows = 2, int cols = 3) {
  std::string s = "[";
  for (int i = 0; i < rows; ++i) {
    s += i ? ", [" : "[";
    for (int j = 0; j < cols; ++j) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%8.3f", j ? ", " : "", m[i * n + j]);
      s += buf;
    }
    s += ", ...]";
  }
  return s + ", ...]";
}

// Checks the corner of out = a @ b against a dot product computed here on the host.
void check_matmul_corner(const ev::Tensor& a, const ev::Tensor& b, const std::vector<float>& out,
                         std::int64_t n) {
  std::vector<float> ha = a.to_vector<float>();
  std::vector<float> hb = b.to_vector<float>();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      double ref = 0;
      for (std::int64_t k = 0; k < n; ++k) ref += double(ha[i * n + k]) * double(hb[k * n + j]);
      double got = out[i * n + j];
      check(std::abs(got - ref) <= 1e-3 * (1.0 + std::abs(ref)),
            "out[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(got) +
                ", the host computes " + std::to_string(ref));
    }
  }
}

// Python's threading.Event, which the tutorial pairs with add_completion_callback: a flag that
// one thread sets and others wait for, blocking on a condition variable. It is the custom
// event class of examples/cpp/08_custom_event.hpp.
using ThreadingEvent = examples::MyEvent;

// ---------------------------------------------------------------------------------------------
// The scenarios, in the order of the tutorial's snippets.

// Tutorial point 1: "Event() creates an event that is not completed by default."
void new_event_is_not_completed(const Context&) {
  ev::Event e;
  say("ev::Event e;                 -> %s", e.str().c_str());
  say("e.completed()                -> %s", yes_no(e.completed()));
  say("e.status()                   -> %s", std::string(ev::name(e.status())).c_str());
  check(!e.completed(), "a new event must not be completed");
  check(e.status() == ev::EventStatus::empty, "a new event must be empty");
  // The tutorial's "not completed" would make a plain wait hang forever; we make it an error.
  try {
    e.wait();
    check(false, "wait() on a never-recorded event returned");
  } catch (const ev::StateError& err) {
    say("e.wait()                     -> StateError: %s", err.what());
  }
}

// Tutorial point 2/3: record(output) ties the event to the op; wait() blocks until it is done.
void wait_for_one_op(const Context& ctx) {
  ev::Tensor a = ctx.randn(ctx.n);
  ev::Tensor b = ctx.randn(ctx.n);
  ev::Tensor out = ev::matmul(a, b);
  ev::Event e;
  e.record(out);
  say("out = ev::matmul(a, b)       -> (%lld x %lld) @ (%lld x %lld), enqueued",
      static_cast<long long>(ctx.n), static_cast<long long>(ctx.n),
      static_cast<long long>(ctx.n), static_cast<long long>(ctx.n));
  say("e.record(out)                -> event tied to the matmul");
  auto t0 = Clock::now();
  e.wait();
  auto waited = Clock::now() - t0;
  say("e.wait()                     -> returned after %s, e.completed() = %s",
      us(waited).c_str(), yes_no(e.completed()));
  check(e.completed(), "completed() must be true after wait()");
  check(out.ready(), "the output must be ready once its event has finished");
  std::vector<float> host = out.to_vector<float>();
  say("out[0:2, 0:3]                = %s", corner(host, ctx.n).c_str());
  check_matmul_corner(a, b, host, ctx.n);
  say("checked against a dot product computed on the host");
}

// Tutorial point 2 (note): an event may be tied to several ops; it finishes when all have
// finished (examples/cpp/09_multiple_ops_one_event.hpp).
void one_event_several_ops(const Context& ctx) {
  DemoNarrator narrator;
  examples::one_event_several_ops(narrator, ctx.device, ctx.n);
}

// Tutorial point 8: wait_all([event1, event2]) waits until every listed event has finished.
void wait_all_events(const Context& ctx) {
  ev::Tensor a = ctx.randn(ctx.n), b = ctx.randn(ctx.n);
  ev::Tensor c = ctx.randn(ctx.n), d = ctx.randn(ctx.n);
  ev::Tensor output1 = ev::matmul(a, b);
  ev::Tensor output2 = ev::matmul(c, d);
  ev::Event event1, event2;
  event1.record(output1);
  event2.record(output2);
  auto t0 = Clock::now();
  ev::wait_all({event1, event2});
  say("ev::wait_all({event1, event2}) -> returned after %s", us(Clock::now() - t0).c_str());
  say("event1.completed() = %s, event2.completed() = %s", yes_no(event1.completed()),
      yes_no(event2.completed()));
  check(event1.completed() && event2.completed(), "wait_all must wait for both events");
  std::vector<float> h1 = output1.to_vector<float>();
  std::vector<float> h2 = output2.to_vector<float>();
  say("output1[0:2, 0:3] = %s", corner(h1, ctx.n).c_str());
  say("output2[0:2, 0:3] = %s", corner(h2, ctx.n).c_str());
  check_matmul_corner(c, d, h2, ctx.n);
}

// Tutorial point 7: time_elapsed() is the device time of the recorded work, in microseconds.
void analyse_performance(const Context& ctx) {
  // The first matmul also starts the BLAS's threads; keep that out of the table.
  ev::matmul(ctx.randn(64), ctx.randn(64)).wait();
  say("%6s  %16s  %10s", "n", "time_elapsed()", "GFLOP/s");
  for (std::int64_t n : {ctx.n / 2, ctx.n, ctx.n * 2}) {
    ev::Tensor a = ctx.randn(n), b = ctx.randn(n);
    ev::Tensor output = ev::matmul(a, b);
    ev::Event event;
    event.record(output);
    event.wait();
    Micros t = event.time_elapsed();
    say("%6lld  %16s  %10.1f", static_cast<long long>(n), us(t).c_str(), gflops(n, t));
    check(t.count() > 0, "time_elapsed() of a finished matmul must be positive");
  }
}

// Tutorial point 4: poll() checks without blocking; the host does other work until the op is done.
void poll_loop(const Context& ctx) {
  ev::Tensor a = ctx.randn(ctx.big_n), b = ctx.randn(ctx.big_n);
  ev::Tensor output = ev::matmul(a, b);
  ev::Event event;
  event.record(output);
  long iterations = 0;
  double other_work = 0;  // kept, so that the compiler keeps the work
  auto t0 = Clock::now();
  while (!event.poll()) {
    for (int i = 0; i < 1000; ++i) other_work += std::sin(i * 1e-3);  // "other work"
    ++iterations;
  }
  auto spent = Clock::now() - t0;
  say("while (!event.poll()) { other work; } -> %ld iterations in %s", iterations,
      us(spent).c_str());
  say("each iteration did a unit of the host's own work (checksum %.1f)", other_work);
  check(event.completed() && output.ready(), "the loop ends only once the op is done");
  say("event.completed() = %s, output ready = %s", yes_no(event.completed()),
      yes_no(output.ready()));
}

// Tutorial point 5: reset() puts the event back to not completed.
void reset_event(const Context& ctx) {
  ev::Tensor output = ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n));
  ev::Event event;
  event.record(output);
  event.wait();
  say("after wait():  event.completed() = %s", yes_no(event.completed()));
  event.reset();
  say("event.reset(); event.completed() = %s (status %s)", yes_no(event.completed()),
      std::string(ev::name(event.status())).c_str());
  check(!event.completed() && event.status() == ev::EventStatus::empty,
        "reset() must make the event empty again");

  // The event can be used again: record new work on it. While that work is pending, reset()
  // refuses (the event would forget work still running); a UserEvent holds the work back so
  // the refusal shows on any machine.
  ev::UserEvent gate;
  ev::Stream s(ctx.device);
  s.wait(gate);
  {
    ev::StreamGuard guard(s);
    event.record(ev::matmul(output, output));
  }
  try {
    event.reset();
    check(false, "reset() of a pending event must be a StateError");
  } catch (const ev::StateError& e) {
    say("event.record(...); event.reset() while pending -> StateError: %s", e.what());
  }
  gate.set();
  event.wait();
  say("gate.set(); event.wait(); completed() = %s (reused)", yes_no(event.completed()));
  check(event.completed(), "a reset event must be usable again");
}

// Tutorial point 6: the attributes completed and device.
void attributes(const Context& ctx) {
  ev::Event e;
  say("ev::Event e;            e.device() = %s", device_or_none(e.device()).c_str());
  check(!e.device(), "an unbound event has no device until its first record");
  ev::Tensor out = ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n));
  e.record(out);
  say("e.record(out);          e.device() = %s (out is on %s)",
      device_or_none(e.device()).c_str(), out.device().str().c_str());
  check(e.device() == ctx.device, "the event's device must be the device of the tied op");
  ev::Event bound(ctx.device);
  say("ev::Event bound(%s);   bound.device() = %s before any record", ctx.device.str().c_str(),
      device_or_none(bound.device()).c_str());
  check(bound.device() == ctx.device, "an event built for a device reports it");
  e.wait();
  say("e.completed() = %s, e.timing_enabled() = %s, e.str() = %s", yes_no(e.completed()),
      yes_no(e.timing_enabled()), e.str().c_str());
}

// Tutorial point 9: matmul is asynchronous: the call returns long before the result is ready.
void matmul_is_asynchronous(const Context& ctx) {
  ev::Tensor a = ctx.randn(ctx.big_n), b = ctx.randn(ctx.big_n);
  a.wait();  // the inputs are made first, so that only the matmul is timed
  b.wait();
  auto t0 = Clock::now();
  ev::Tensor out = ev::matmul(a, b);
  auto call = Clock::now() - t0;
  bool ready_on_return = out.ready();
  ev::Event e;
  e.record(out);
  e.wait();
  auto until_ready = Clock::now() - t0;
  say("out = ev::matmul(a, b) (%lld x %lld) returned after %s; out ready then: %s",
      static_cast<long long>(ctx.big_n), static_cast<long long>(ctx.big_n), us(call).c_str(),
      yes_no(ready_on_return));
  say("the result was ready %s after the call; the op took %s of device time",
      us(until_ready).c_str(), us(e.time_elapsed()).c_str());
  double ratio = std::chrono::duration<double>(until_ready) / std::chrono::duration<double>(call);
  say("the call returned %.0fx sooner than the result", ratio);
  // A synchronous matmul would make the two equal; asynchronous ones differ by 100x or more.
  check(call * 2 < until_ready, "matmul must return before its result is ready");
}

// Tutorial point 10: a device-wide synchronize() waits for all work on the device, every stream.
void device_synchronize(const Context& ctx) {
  ev::Stream second(ctx.device);
  std::vector<ev::Tensor> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n)));
  {
    ev::StreamGuard guard(second);
    for (int i = 0; i < 2; ++i) outs.push_back(ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n)));
  }
  say("enqueued 3 matmuls on the default stream and 2 on %s", second.str().c_str());
  auto t0 = Clock::now();
  ev::synchronize(ctx.device);
  auto waited = Clock::now() - t0;
  int ready = 0;
  for (const ev::Tensor& t : outs) ready += t.ready() ? 1 : 0;
  say("ev::synchronize(%s) -> returned after %s; %d of 5 outputs ready",
      ctx.device.str().c_str(), us(waited).c_str(), ready);
  say("(the tutorial spells it torch.cuda.synchronize(); ours works on every device)");
  check(ready == 5, "synchronize() must wait for every stream of the device");
  ev::synchronize();
  say("ev::synchronize()  -> every device, returned at once as nothing is left");
}

// Tutorial point 11: add_completion_callback sets a threading.Event that another thread waits on.
void completion_callback(const Context& ctx) {
  ev::Tensor output = ev::matmul(ctx.randn(ctx.big_n), ctx.randn(ctx.big_n));
  // The callback owns what it touches (a shared_ptr), so nothing it uses can go away
  // before it has run, whatever the order in which the threads finish.
  struct Shared {
    ThreadingEvent event;
    std::thread::id callback_thread;
  };
  auto shared = std::make_shared<Shared>();
  output.add_completion_callback([shared] {
    shared->callback_thread = std::this_thread::get_id();
    shared->event.set();
  });
  say("output.add_completion_callback(on_complete) -> on_complete sets a threading event");
  bool waiter_saw_ready = false;
  Clock::duration waiter_blocked{};
  std::thread waiter([&] {
    auto t0 = Clock::now();
    shared->event.wait();
    waiter_blocked = Clock::now() - t0;
    waiter_saw_ready = output.ready();
  });
  std::thread::id waiter_id = waiter.get_id();
  waiter.join();
  say("a std::thread waited %s in event.wait(); then output ready = %s", us(waiter_blocked).c_str(),
      yes_no(waiter_saw_ready));
  bool runtime_thread = shared->callback_thread != std::this_thread::get_id() &&
                        shared->callback_thread != waiter_id;
  say("the callback ran on a runtime thread (not main, not the waiter): %s",
      yes_no(runtime_thread));
  check(waiter_saw_ready, "the op must be done when its completion callback runs");
  check(runtime_thread, "callbacks run on a thread of the runtime");
}

// Tutorial point 12: an event class of one's own (examples/cpp/08_custom_event.hpp).
void custom_event(const Context& ctx) {
  DemoNarrator narrator;
  examples::custom_event(narrator, ctx.device, ctx.big_n);
}

// ---------------------------------------------------------------------------------------------
// Beyond the tutorial.

void timeouts(const Context& ctx) {
  ev::UserEvent gate(ctx.device);
  ev::Stream s(ctx.device);
  s.wait(gate);
  ev::Tensor out;
  {
    ev::StreamGuard guard(s);
    out = ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n));
  }
  ev::Event e;
  e.record(out);
  auto t0 = Clock::now();
  bool done = e.wait_for(std::chrono::milliseconds(20));
  say("e.wait_for(20ms) on an op held back by a gate -> %s after %s", yes_no(done),
      us(Clock::now() - t0).c_str());
  check(!done, "wait_for must time out while the op cannot run");
  gate.set();
  t0 = Clock::now();
  done = e.wait_for(std::chrono::seconds(30));
  say("gate.set(); e.wait_for(30s)                  -> %s after %s", yes_no(done),
      us(Clock::now() - t0).c_str());
  check(done, "wait_for must succeed once the op has run");
}

void wait_any_event(const Context& ctx) {
  ev::UserEvent gate(ctx.device);
  ev::Stream held(ctx.device);
  held.wait(gate);
  ev::Tensor slow;
  {
    ev::StreamGuard guard(held);
    slow = ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n));
  }
  ev::Tensor fast = ev::matmul(ctx.randn(ctx.n), ctx.randn(ctx.n));
  ev::Event e_slow, e_fast;
  e_slow.record(slow);
  e_fast.record(fast);
  std::optional<std::size_t> first = ev::wait_any({e_slow, e_fast});
  say("ev::wait_any({held_back, free}) -> index %s",
      first ? std::to_string(*first).c_str() : "nullopt");
  check(first == std::size_t{1}, "wait_any must return the event that finished");
  std::optional<std::size_t> none = ev::wait_any({e_slow}, std::chrono::milliseconds(10));
  say("ev::wait_any({held_back}, 10ms) -> %s", none ? std::to_string(*none).c_str() : "nullopt");
  check(!none, "wait_any must time out when no event can finish");
  gate.set();
  ev::wait_all({e_slow, e_fast});
  say("gate.set(); ev::wait_all(...)   -> both completed: %s",
      yes_no(e_slow.completed() && e_fast.completed()));
}

// Beyond the tutorial: a UserEvent as a gate (examples/cpp/10_user_event_gate.hpp).
void user_event_gate(const Context& ctx) {
  DemoNarrator narrator;
  examples::user_event_gate(narrator, ctx.device, ctx.n);
}

// A span of device time, in microseconds from a common origin.
struct Interval {
  double start = 0, end = 0;
};

// The union of `spans`, as sorted disjoint intervals: the time a stream was busy.
std::vector<Interval> merged(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end(), [](Interval a, Interval b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (Interval x : spans) {
    if (!out.empty() && x.start <= out.back().end) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

double total(const std::vector<Interval>& spans) {
  double t = 0;
  for (Interval x : spans) t += x.end - x.start;
  return t;
}

// How long two sets of disjoint sorted intervals were both busy.
double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double t = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    t += std::max(0.0, std::min(a[i].end, b[j].end) - std::max(a[i].start, b[j].start));
    (a[i].end < b[j].end) ? ++i : ++j;
  }
  return t;
}

// The device-time span of each event's op, on one clock: an event's completion is its op's
// end (elapsed_time from a common reference event), and time_elapsed its duration.
std::vector<Interval> spans_of(const std::vector<ev::Event>& ops, const ev::Event& reference) {
  std::vector<Interval> out;
  for (const ev::Event& e : ops) {
    const double end = reference.elapsed_time(e).count() * 1e3;  // ms -> µs
    out.push_back({end - e.time_elapsed().count(), end});
  }
  return out;
}

// Two streams each run matmuls at the same time; a third stream joins them by waiting on
// both streams' events, and the host waits for everything with wait_all. Under --timeline
// the picture shows the two rows of bars side by side and the join's arrows.
void two_streams(const Context& ctx) {
  ev::Stream s1(ctx.device), s2(ctx.device), joiner(ctx.device);
  ev::Tensor a = ctx.randn(ctx.big_n), b = ctx.randn(ctx.big_n);
  ev::Tensor c = ctx.randn(ctx.big_n), d = ctx.randn(ctx.big_n);
  ev::synchronize(ctx.device);  // inputs made: keep their creation out of the timing

  // Streams are independent: s2 runs to the end while s1 is held back.
  {
    ev::UserEvent gate(ctx.device);
    s1.wait(gate);
    ev::Tensor o1, o2;
    {
      ev::StreamGuard guard(s1);
      o1 = ev::matmul(a, b);
    }
    {
      ev::StreamGuard guard(s2);
      o2 = ev::matmul(c, d);
    }
    o2.wait();
    say("s1 held back, s2 free       -> o2 ready %s while o1 ready %s", yes_no(o2.ready()),
        yes_no(o1.ready()));
    check(o2.ready() && !o1.ready(), "a stream must not wait for another one");
    gate.set();
    o1.wait();
  }

  // The baseline: the same matmuls one after the other on one stream.
  constexpr int kOps = 3;
  ev::Event serial;
  for (int i = 0; i < kOps; ++i) {
    serial.record(ev::matmul(a, b));
    serial.record(ev::matmul(c, d));
  }
  serial.wait();

  // Overlap: kOps matmuls on each stream, both released at once by one gate, so the overlap
  // shows what the device does with two streams, not how fast the host enqueues.
  ev::UserEvent go(ctx.device);
  s1.wait(go);
  s2.wait(go);
  std::vector<ev::Event> ops1, ops2;
  ev::Tensor last1, last2;
  for (int i = 0; i < kOps; ++i) {
    {
      ev::StreamGuard guard(s1);
      last1 = ev::matmul(a, b);
    }
    {
      ev::StreamGuard guard(s2);
      last2 = ev::matmul(c, d);
    }
    ops1.emplace_back().record(last1);
    ops2.emplace_back().record(last2);
  }
  // The join: a third stream waits on both streams' events, then adds their last results.
  ev::Event done1 = s1.record_event(), done2 = s2.record_event();
  joiner.wait(done1);
  joiner.wait(done2);
  ev::Tensor joined;
  {
    ev::StreamGuard guard(joiner);
    joined = ev::add(last1, last2);
  }
  ev::Event join_event;
  join_event.record(joined);
  say("%d matmuls (%lld x %lld) on s1 and %d on s2, released together; s3 waits on both and "
      "adds their results", kOps, static_cast<long long>(ctx.big_n),
      static_cast<long long>(ctx.big_n), kOps);
  go.set();
  auto t0 = Clock::now();
  ev::wait_all({done1, done2, join_event});
  say("ev::wait_all({s1 done, s2 done, join}) -> returned after %s", us(Clock::now() - t0).c_str());

  // Each op's span, on one clock: microseconds from the end of s1's first op.
  const ev::Event& origin = ops1.front();
  const std::vector<Interval> busy1 = merged(spans_of(ops1, origin));
  const std::vector<Interval> busy2 = merged(spans_of(ops2, origin));
  const Interval join = spans_of({join_event}, origin).front();
  const double zero = std::min(busy1.front().start, busy2.front().start);
  const double end = std::max(busy1.back().end, busy2.back().end);
  const double t1 = total(busy1), t2 = total(busy2), both = overlap(busy1, busy2);
  say("s1 busy %s (from %s to %s), s2 busy %s (from %s to %s)", us(Micros(t1)).c_str(),
      us(Micros(busy1.front().start - zero)).c_str(), us(Micros(busy1.back().end - zero)).c_str(),
      us(Micros(t2)).c_str(), us(Micros(busy2.front().start - zero)).c_str(),
      us(Micros(busy2.back().end - zero)).c_str());
  say("overlap: %s with both streams busy = %.0f%% of the shorter one's busy time",
      us(Micros(both)).c_str(), 100 * both / std::min(t1, t2));
  say("both done %s after the first start; one stream, one after the other: %s -> %.2fx",
      us(Micros(end - zero)).c_str(), us(serial.time_elapsed()).c_str(),
      serial.time_elapsed().count() / (end - zero));
  say("the join (add on s3) started %s after the later of the two streams ended",
      us(Micros(join.start - end)).c_str());
  // How much the streams overlap depends on the machine (ops that each fill the device, as a
  // big matmul on a CPU's cores does, gain little from running side by side), so it is
  // reported, not checked. That the join ran after both streams is a rule. (1 µs of slack:
  // elapsed_time is in milliseconds as a double.)
  check(join.start >= end - 1.0, "the join must start after both streams' work has ended");
  check(joined.ready(), "wait_all must wait for the join");
}

// Data-parallel training's overlap: each step's gradients are all-reduced on a stream of
// their own while the next step computes, joined by events (a stream waits for the event of
// the gradients; the host waits for the last all-reduce). With one process this is a
// communicator of one rank (MPI's singleton); under `mpirun -np N eventide demo` every rank
// runs it with the others (docs/SCALE_OUT.md).
void all_reduce_overlaps_compute(const Context& ctx) {
  if (!ev::distributed::capabilities().mpi) {
    try {
      ev::distributed::init();
    } catch (const ev::StateError& e) {
      say("this build has no MPI, so there is no communicator: %s", e.what());
      return;
    }
  }
  ev::distributed::InitOptions options;
  options.device = ctx.device;
  ev::distributed::Communicator comm = ev::distributed::init(options);
  say("ev::distributed::init() -> %s", comm.str().c_str());
  ev::Stream compute(ctx.device), communicate(ctx.device);
  ev::Tensor a = ctx.randn(ctx.big_n), b = ctx.randn(ctx.big_n);
  const std::int64_t grad_elems = ctx.device.is_cpu() ? (4 << 20) : (16 << 20);
  ev::synchronize(ctx.device);
  constexpr int kSteps = 4;
  std::vector<ev::Event> computed, reduced;
  ev::Tensor last;
  // Enqueued in program order, as a training loop does: the host's calls take microseconds,
  // the first matmul milliseconds, so the device sees every step before it is done. (Holding
  // the compute stream behind a UserEvent instead let eventide launch the held steps stream
  // by stream on release, every matmul ahead of the first all_reduce: on a GPU the matmuls'
  // blocks then filled the SMs first and the all_reduces waited for all of them.)
  for (int step = 0; step < kSteps; ++step) {
    ev::Tensor grads;
    {
      ev::StreamGuard guard(compute);
      computed.emplace_back().record(ev::matmul(a, b));
      grads = ev::full({grad_elems}, step + 1.0, ev::DType::f32, ctx.device);
    }
    ev::Event ready;
    ready.record(grads);
    communicate.wait(ready);
    ev::StreamGuard guard(communicate);
    last = comm.all_reduce(grads, ev::distributed::ReduceOp::avg);
    reduced.emplace_back().record(last);
  }
  say("%d steps: a matmul (%lld x %lld) and its gradients on the compute stream; each step's "
      "all_reduce on the other stream, after an event of its gradients", kSteps,
      static_cast<long long>(ctx.big_n), static_cast<long long>(ctx.big_n));
  ev::wait_all(reduced);
  const ev::Event& origin = computed.front();
  const std::vector<Interval> busy = merged(spans_of(computed, origin));
  const std::vector<Interval> comms = merged(spans_of(reduced, origin));
  const double hidden = overlap(busy, comms), t = total(comms);
  say("all_reduce busy %s, of which %s (%.0f%%) while the compute stream was busy",
      us(Micros(t)).c_str(), us(Micros(hidden)).c_str(), t > 0 ? 100 * hidden / t : 0.0);
  const std::vector<float> v = last.to(ev::Device::cpu()).to_vector<float>();
  say("the last step's average over %d rank(s): %.1f", comm.size(), v.front());
  check(v.front() == static_cast<float>(kSteps), "the all_reduce's average must be the step's value");
  // The rule, checked: each all_reduce started after its gradients' event.
  for (int i = 0; i < kSteps; ++i) {
    const Interval r = spans_of({reduced[static_cast<std::size_t>(i)]}, origin).front();
    const Interval c = spans_of({computed[static_cast<std::size_t>(i)]}, origin).front();
    check(r.start >= c.end - 1.0, "an all_reduce must start after its step's compute");
  }
}

// A chain of small ops captured once and replayed: each replay is one event, like an op's,
// and costs the host a fraction of issuing the ops one by one (on a GPU, one CUDA graph
// launch). A device that cannot capture says why, and the scenario runs on the CPU.
void capture_and_replay(const Context& ctx) {
  ev::Device device = ctx.device;
  constexpr int kChain = 100;
  ev::Tensor x = ev::zeros({256}, ev::DType::f32, device);
  ev::Tensor one = ev::ones({256}, ev::DType::f32, device);
  ev::synchronize(device);  // (not inside a capture: it would be refused)
  std::optional<ev::Capture> capture;
  try {
    capture.emplace(device);
  } catch (const ev::InvalidArgument& e) {
    say("%s; shown on the cpu", e.what());
    device = ev::Device::cpu();
    x = ev::zeros({256}, ev::DType::f32, device);
    one = ev::ones({256}, ev::DType::f32, device);
    capture.emplace(device);
  }
  ev::Event start(device), end(device);
  ev::Graph g;
  {
    ev::StreamGuard on(capture->stream());
    start.record();
    for (int i = 0; i < kChain; ++i) ev::add_out(x, x, one);
    end.record();
    g = capture->end();
  }
  capture.reset();
  say("captured %s: nothing ran, x[0] = %.0f", g.str().c_str(), x.to_vector<float>()[0]);
  ev::Stream s(device);
  const auto e0 = Clock::now();
  {
    ev::StreamGuard on(s);
    for (int i = 0; i < kChain; ++i) ev::add_out(x, x, one);
  }
  const auto e1 = Clock::now();
  x.wait();
  const auto r0 = Clock::now();
  ev::Event done = g.replay(s);
  const auto r1 = Clock::now();
  done.wait();  // the whole replay: its ops and the events' points
  check(end.poll(), "the replay's event must cover the points of the events recorded in it");
  say("the host issued %d adds eagerly in %s, the replay of all of them in %s", kChain,
      us(e1 - e0).c_str(), us(r1 - r0).c_str());
  say("replay: done.time_elapsed() = %s; start -> end (recorded in the capture) = %s",
      us(done.time_elapsed()).c_str(), us(Micros(start.elapsed_time(end))).c_str());
  const float v = x.to_vector<float>()[0];
  say("x[0] = %.0f after %d eager adds and one replay", v, kChain);
  check(v == 2.0f * kChain, "the replay must run every captured add once, after the eager ones");
}

struct Scenario {
  const char* title;
  const char* source;  // which point of the tutorial (docs/TUTORIAL.md) it shows
  void (*run)(const Context&);
  const char* look_at;  // what its timeline page shows: the page's note under its title
};

const Scenario kScenarios[] = {
    {"A new event is not completed", "tutorial point 1", new_event_is_not_completed,
     "Nothing is drawn: an event never recorded has no work to wait for, so its wait() is "
     "refused (StateError) instead of blocking for ever."},
    {"Wait for an op to complete", "tutorial points 2, 3", wait_for_one_op,
     "The matmul runs after its two randn inputs on stream 0; the host's e.wait() (grey) "
     "starts as soon as they are enqueued and ends with the matmul."},
    {"One event tied to several ops", "tutorial point 2", one_event_several_ops,
     "Op 1 (the matmul on stream 0) ends while op 2 waits on stream 1 (hatched) for a gate "
     "opened after out1.wait(); the event's wait, the second grey bar, ends only with op 2."},
    {"Synchronize several ops: wait_all", "tutorial point 8", wait_all_events,
     "Four randn inputs and two matmuls on one stream; wait_all's host waits (grey) end with"
     "the first matmul, then with the second."},
    {"Analyse an op's performance: time_elapsed", "tutorial point 7", analyse_performance,
     "Matmuls of n/2, n and 2n (after a small warm-up): each bar is the time_elapsed() "
     "printed, several times longer at each doubling of n, and each ends a host wait."},
    {"Check for completion: poll", "tutorial point 4", poll_loop,
     "No host-wait row: while the matmul ran, the host polled the event and did its own work"
     "instead of blocking."},
    {"Reset an event", "tutorial point 5", reset_event,
     "The first matmul is waited for; the second, on stream 1 behind a gate (hatched), is "
     "pending while reset() is refused, and runs once the gate is set."},
    {"Attributes: completed and device", "tutorial point 6", attributes,
     "One matmul after its inputs: the op that gave the event its device; the host waits for"
     "it once."},
    {"matmul is asynchronous", "tutorial point 9", matmul_is_asynchronous,
     "The host waits for each input first; then the matmul's bar and the host's wait for it "
     "start together: ev::matmul returned at once, and the host waited the whole op."},
    {"Device-wide synchronize", "tutorial point 10", device_synchronize,
     "Three matmuls on stream 0 and two on stream 1, each after its inputs, side by side; "
     "synchronize() waits for each stream in turn (grey), ending with the last matmul of "
     "each."},
    {"Completion callback and a waiting thread", "tutorial point 11", completion_callback,
     "The callbacks row: the completion callback runs on the runtime's callback thread as "
     "soon as the matmul ends."},
    {"A custom event class with set() and wait()", "tutorial point 12", custom_event,
     "Each matmul's completion callback (callbacks row) runs as it ends and sets the "
     "user-written MyEvent; the host blocks in MyEvent::wait, which the profiler does not "
     "see."},
    {"Waiting with a timeout: wait_for", "beyond the tutorial", timeouts,
     "Stream 1 is held (hatched) behind a gate while wait_for(20ms) waits in vain; once the "
     "gate is set its inputs and matmul run, and the host's wait ends with the matmul."},
    {"Wait for the first of several: wait_any", "beyond the tutorial", wait_any_event,
     "The free matmul on stream 0 runs at once and wait_any returns; the held one waits on "
     "stream 1 (hatched) until gate.set(), and the host's wait_all ends with it."},
    {"A UserEvent gates a stream", "beyond the tutorial", user_event_gate,
     "Stream 1's matmul and add run only after go.set() and their inputs; on stream 2 the "
     "UserEvent failed, so its wait and the matmul behind it fail (red outline) instead of "
     "running."},
    {"Two streams overlap, joined by events", "beyond the tutorial", two_streams,
     "Left to right: the four inputs (randn, stream 0); stream 2's matmul while stream 1 is "
     "held back (hatched); the baseline, six matmuls one after another on stream 0; then "
     "three matmuls each on streams 1 and 2 at the same time, and stream 3 waiting (hatched) "
     "for both before its add. Compare the overlap's length with the baseline's."},
    {"Capture once, replay as one op: graphs", "beyond the tutorial", capture_and_replay,
     "The 100 adds issued eagerly on one stream, a bar each; then the replay of the same 100, "
     "one bar: the host issued them all at once."},
    {"Gradients all-reduced while the next step computes", "beyond the tutorial",
     all_reduce_overlaps_compute,
     "Each step on the compute stream is a matmul, then its gradients (fill); the other "
     "stream waits (hatched) for each step's gradients, then all-reduces them while the next"
     "step computes."},
};

// What went wrong, with the cause of an OpError.
std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const CheckFailed& e) {
    return std::string("check failed: ") + e.what();
  } catch (const ev::OpError& e) {
    std::string s = std::string("OpError: ") + e.what();
    if (e.cause()) s += " (cause: " + describe(e.cause()) + ")";
    return s;
  } catch (const ev::Error& e) {
    return std::string("eventide error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Runs the demo under an ev::Profiler when a trace or a timeline was asked for, and saves
// them at the end.
class DemoProfile {
 public:
  explicit DemoProfile(const DemoOptions& options) : options_(options) {
    if (options.trace_path || options.timeline_path) profiler_.emplace();
  }

  // Stops recording and writes the files; false (having said why) if that failed.
  bool save(const ev::TimelineOptions& page) {
    if (!profiler_) return true;
    try {
      ev::Profile profile = profiler_->stop();
      std::printf("\nprofile: %zu ops, %zu event records, %zu host waits, %zu callbacks\n",
                  profile.ops().size(), profile.records().size(), profile.host_waits().size(),
                  profile.callbacks().size());
      if (options_.trace_path) {
        profile.export_chrome_trace(*options_.trace_path);
        std::printf("  wrote %s (Chrome trace: open it in https://ui.perfetto.dev or "
                    "chrome://tracing)\n", options_.trace_path->c_str());
      }
      if (options_.timeline_path) {
        profile.export_timeline(*options_.timeline_path, page);
        std::printf("  wrote %s (timeline: open it in a browser)\n",
                    options_.timeline_path->c_str());
      }
      return true;
    } catch (const std::exception& e) {
      std::printf("\nprofile: FAILED: %s\n", e.what());
      return false;
    }
  }

 private:
  const DemoOptions& options_;
  std::optional<ev::Profiler> profiler_;
};

// The timeline page's title and note: a scenario's own, or for several what the page holds.
ev::TimelineOptions timeline_page(const std::vector<int>& ran, const Device& device) {
  if (ran.size() == 1) {
    const Scenario& sc = kScenarios[static_cast<std::size_t>(ran.front() - 1)];
    return {"Scenario " + std::to_string(ran.front()) + ": " + sc.title + " (" + device.str() + ")",
            sc.look_at};
  }
  std::string which;
  if (ran.size() == std::size(kScenarios)) {
    which = "scenarios 1 to " + std::to_string(ran.size());
  } else {
    for (int n : ran) which += (which.empty() ? "scenarios " : ", ") + std::to_string(n);
  }
  return {"eventide demo: " + which + " (" + device.str() + ")",
          "The scenarios one after another, left to right, as the demo printed them; "
          "`eventide demo --only N --timeline PAGE` draws one, with a note of what to look at."};
}

}  // namespace

int demo_scenario_count() { return static_cast<int>(std::size(kScenarios)); }

std::string demo_scenario_title(int number) {
  const Scenario& sc = kScenarios[static_cast<std::size_t>(number - 1)];
  return std::string(sc.title) + " (" + sc.source + ")";
}

int run_demo(const DemoOptions& options) {
  const Device device = options.device;
  Context ctx{device};
  if (device.is_cuda()) {
    // A GPU finishes a 1024 matmul in microseconds; asynchrony shows on bigger work.
    ctx.n = 1024;
    ctx.big_n = 4096;
  }
  ev::manual_seed(2024);  // the same printed values on every run
  const int total = static_cast<int>(std::size(kScenarios));
  std::vector<int> ran_numbers;
  std::string name = ev::device_info(device).name;
  std::printf("eventide %s demo on %s%s\n", std::string(ev::version()).c_str(),
              device.str().c_str(), name == device.str() ? "" : (" (" + name + ")").c_str());
  std::printf("The scenarios of the torch.mps.Event tutorial (docs/TUTORIAL.md), then what eventide adds; times in µs.\n");
  DemoProfile profile(options);

  std::vector<int> failed;
  auto start = Clock::now();
  int ran = 0;
  for (int i = 0; i < total; ++i) {
    if (!options.only.empty() &&
        std::find(options.only.begin(), options.only.end(), i + 1) == options.only.end()) {
      continue;
    }
    ++ran;
    ran_numbers.push_back(i + 1);
    const Scenario& sc = kScenarios[i];
    std::printf("\n[%d/%d] %s  (%s)\n", i + 1, total, sc.title, sc.source);
    auto t0 = Clock::now();
    try {
      sc.run(ctx);
      std::printf("    -> ok (%s)\n", us(Clock::now() - t0).c_str());
    } catch (...) {
      std::printf("    -> FAILED: %s\n", describe(std::current_exception()).c_str());
      failed.push_back(i + 1);
      // Leave nothing of a failed scenario running into the next one.
      try {
        ev::synchronize(device);
      } catch (...) {
      }
    }
    std::fflush(stdout);
  }

  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const bool saved = profile.save(timeline_page(ran_numbers, device));
  if (failed.empty()) {
    if (ran == total) {
      std::printf("\nsummary: all %d scenarios passed on %s in %.1f ms\n", total,
                  device.str().c_str(), ms);
    } else {
      std::printf("\nsummary: %d of %d scenarios run, all passed on %s in %.1f ms\n", ran, total,
                  device.str().c_str(), ms);
    }
    return saved ? kExitOk : kExitFailed;
  }
  std::string which;
  for (int f : failed) which += (which.empty() ? "" : ", ") + std::to_string(f);
  std::printf("\nsummary: %d of %d scenarios FAILED on %s (%s) in %.1f ms\n",
              static_cast<int>(failed.size()), ran, device.str().c_str(), which.c_str(), ms);
  return kExitFailed;
}

}  // namespace eventide::cli
