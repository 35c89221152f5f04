// Allocation failure: when memory runs out (address-space exhaustion), no runtime code lets
// std::bad_alloc escape into std::terminate, and what cannot be allocated is either reported
// by the call that needed it (an exception) or worked around; it is never lost: every event
// still finishes or fails, none says finished before its work ran, nothing hangs, a callback
// whose add_callback returned runs once, and the runtime still works once memory is back.
//
// How: this binary replaces operator new. Once armed, it fails allocations, counted over all
// threads from the arming:
//   * once: only the N-th (a single failure, at each site in turn as N grows);
//   * from: the N-th and every one after it, until disarmed (what exhaustion does: the code
//     that handles the first failure meets more).
// Each scenario runs in a child process (fork) for N = 0, 1, 2, ... until a run injects no
// failure (N is past the scenario's last allocation). The parent checks how each child ended
// and kills it after a deadline, so a hang fails the test instead of stalling it. The child's
// stderr is shown only when it failed.
//
// Threads make the N-th allocation vary a little from run to run; every N is still a valid
// run, and the sweep covers every allocation of the scenario in both modes. A child that broke
// reports where its first allocation failed and, if it ended in std::terminate, where that was
// called from; EVENTIDE_TEST_FAIL_ALLOCATION=N runs that one N again.
//
// The length (over 600 lines): the binary's one operator new is the fault injector, and the
// scenarios (coroutines among them) share its bookkeeping and checks; split, each part would
// have to repeat the injector and the parent's sweep.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <eventide/coro.hpp>
#include <eventide/eventide.hpp>

// --- Fault injection: operator new --------------------------------------------------------

namespace {

enum Mode : int { kOff = 0, kOnce = 1, kFrom = 2 };

std::atomic<int> g_mode{kOff};
std::atomic<long> g_countdown{0};  // allocations left before the first failure
std::atomic<long> g_injected{0};   // failures injected so far

bool fail_this_allocation() noexcept {
  const int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == kOff) return false;
  const long left = g_countdown.fetch_sub(1, std::memory_order_relaxed);
  if (left > 0) return false;
  if (left < 0 && mode == kOnce) return false;
  if (g_injected.fetch_add(1, std::memory_order_relaxed) == 0) {
    // Where the first failure struck, for the report of a child that broke.
    std::fputs("CHILD-INJECTED: the first failed allocation was made from:\n", stderr);
    void* frames[12];
    const int n = backtrace(frames, 12);
    backtrace_symbols_fd(frames + std::min(n, 3), n - std::min(n, 3), STDERR_FILENO);
  }
  return true;
}

void arm(Mode mode, long n) noexcept {
  g_countdown.store(n, std::memory_order_relaxed);
  g_injected.store(0, std::memory_order_relaxed);
  g_mode.store(mode, std::memory_order_seq_cst);
}

long disarm() noexcept {
  g_mode.store(kOff, std::memory_order_seq_cst);
  return g_injected.load(std::memory_order_relaxed);
}

void* allocate(std::size_t n, std::size_t align) noexcept {
  if (fail_this_allocation()) return nullptr;
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  void* p = nullptr;
  return posix_memalign(&p, align, n) == 0 ? p : nullptr;
}

void* allocate_or_throw(std::size_t n, std::size_t align) {
  if (void* p = allocate(n, align)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new[](std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

namespace ev = eventide;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// --- The child: scenarios and their checks ------------------------------------------------
//
// Everything the checks need lives in static storage made before arming, so the bookkeeping
// itself allocates nothing while allocations fail.

constexpr int kSlots = 32;

// Child exit codes.
constexpr int kChildOk = 0;
constexpr int kChildNothingInjected = 1;
constexpr int kChildBroken = 2;

struct Slot {
  std::optional<ev::Event> event;  // an event the scenario got (the call returned)
  int guards = -1;                 // the op (index in g_ran) whose completion it reports
};
std::array<Slot, kSlots> g_slots;
std::array<std::atomic<bool>, kSlots> g_ran{};        // op i's body ran to its end
std::array<std::atomic<int>, kSlots> g_callback_runs{};
std::array<bool, kSlots> g_callback_added{};           // add_callback i returned

std::atomic<bool> g_broken{false};

void fail_child(const char* what, int index) {
  g_broken = true;
  std::fprintf(stderr, "CHILD-BROKEN: %s (%d)\n", what, index);
  std::fflush(stderr);
}

// Runs one step of a scenario: an exception (bad_alloc, or an eventide error the failure
// caused) is a fine outcome; std::terminate is not, and ends the child with SIGABRT.
template <class F>
void step(F&& f) {
  try {
    f();
  } catch (...) {
  }
}

void keep(int slot, const ev::Event& e, int guards = -1) {
  g_slots[slot].event = e;  // copies a shared_ptr: no allocation
  g_slots[slot].guards = guards;
}

void add_counted_callback(int i, ev::Event e) {
  e.add_callback([i] { g_callback_runs[static_cast<std::size_t>(i)].fetch_add(1); });
  g_callback_added[static_cast<std::size_t>(i)] = true;
}

// Ops, waits across streams, UserEvents set, failed and abandoned, callbacks, tensor ops,
// a stream guard, and the waits and queries of the public API.
void mixed_work(ev::Stream& a, ev::Stream& b, ev::Stream& c) {
  const ev::Device cpu = ev::Device::cpu();
  std::optional<ev::UserEvent> gate;
  step([&] { gate.emplace(); });
  step([&] { keep(0, a.enqueue("first", [] { g_ran[0] = true; }), 0); });
  step([&] {
    if (g_slots[0].event) b.wait(*g_slots[0].event);
  });
  step([&] { keep(1, b.enqueue("after_first", [] { g_ran[1] = true; }), 1); });
  step([&] {
    if (gate) c.wait(*gate);
  });
  step([&] { keep(2, c.enqueue("gated", [] { g_ran[2] = true; }), 2); });
  step([&] {
    if (g_slots[1].event) add_counted_callback(0, *g_slots[1].event);
  });
  step([&] {
    if (gate) add_counted_callback(1, *gate);
  });
  step([&] {
    if (g_slots[2].event) add_counted_callback(2, *g_slots[2].event);
  });
  step([&] { keep(3, a.enqueue("throws", [] { throw std::runtime_error("an op that throws"); })); });
  step([&] {
    keep(4, b.enqueue("allocates", [] {
      std::vector<int> v(64, 1);  // bad_alloc here fails the op, not the process
      g_ran[4] = v.size() == 64;
    }), 4);
  });
  step([&] {
    ev::Tensor t = ev::full({16}, 2.0, ev::DType::f32, cpu);
    ev::Tensor u = t + t;
    ev::Event e;
    e.record(u);
    keep(5, e);
  });
  step([&] {
    ev::Stream d(cpu);
    ev::UserEvent abandoned;
    d.wait(abandoned);
    keep(6, d.enqueue("abandoned", [] { g_ran[6] = true; }), 6);
  });  // the UserEvent's last handle goes: it fails, and so does the op gated on it
  step([&] {
    ev::UserEvent failed;
    keep(7, failed);
    failed.fail(std::make_exception_ptr(std::runtime_error("failed by the host")));
  });
  step([&] {
    // A stream that waits on a failed event: the wait fails in order, and so does what follows.
    ev::Stream d(cpu);
    if (g_slots[7].event) d.wait(*g_slots[7].event);
    keep(10, d.enqueue("after_a_failed_wait", [] { g_ran[10] = true; }), 10);
  });
  step([&] {
    ev::UserEvent again;
    again.set();
    again.reset();  // pending again, for the next round
    keep(11, again);
    again.set();
  });
  step([&] {
    if (!g_slots[5].event) return;
    ev::Event copy = *g_slots[5].event;
    if (copy.wait_for(2s)) copy.reset();  // back to EMPTY
  });
  step([&] {
    ev::Tensor t = ev::full({8}, 3.0, ev::DType::f32, cpu);
    (void)t.to_vector<float>();
  });
  step([&] { b.wait_stream(a); });
  step([&] {
    ev::StreamGuard guard(b);
    if (!(ev::Stream::current(cpu) == b)) fail_child("a StreamGuard returned but its stream is not current", 0);
    keep(8, ev::Stream::current(cpu).record_event());
  });
  step([&] {
    if (g_slots[8].event) add_counted_callback(3, *g_slots[8].event);
  });
  // Waits and queries while allocations fail.
  for (int i = 0; i < 12; ++i) {
    step([&] {
      if (g_slots[i].event) (void)g_slots[i].event->poll();
    });
    step([&] {
      if (g_slots[i].event) (void)g_slots[i].event->status();
    });
  }
  step([&] {
    if (g_slots[1].event) (void)g_slots[1].event->wait_for(2s);
  });
  step([&] {
    if (g_slots[0].event && g_slots[2].event) (void)ev::wait_any({*g_slots[0].event, *g_slots[2].event}, 50ms);
  });
  step([&] {
    if (g_slots[0].event && g_slots[4].event) (void)ev::wait_all_for({*g_slots[0].event, *g_slots[4].event}, 2s);
  });
  step([&] { (void)a.query(); });
  step([&] { a.synchronize(); });
  step([&] {
    if (g_slots[3].event) (void)g_slots[3].event->str();
  });
  step([&] {
    if (gate) gate->set();
  });
  step([&] { keep(9, c.record_event(), g_slots[2].event ? 2 : -1); });
  step([&] {
    if (g_slots[9].event) add_counted_callback(4, *g_slots[9].event);
  });
  step([&] { b.synchronize(); });
  gate.reset();  // an unset gate fails here, and releases what waits on it
}

// The profiler's hooks under allocation failure: launches, records, host waits, callbacks.
void profiled_work(ev::Stream& a, ev::Stream& b, ev::Stream& c) {
  std::optional<ev::Profiler> profiler;
  step([&] { profiler.emplace(); });
  step([&] { keep(0, a.enqueue("first", [] { g_ran[0] = true; }), 0); });
  step([&] {
    if (g_slots[0].event) b.wait(*g_slots[0].event);
  });
  step([&] { keep(1, b.enqueue("after_first", [] { g_ran[1] = true; }), 1); });
  step([&] {
    if (g_slots[1].event) add_counted_callback(0, *g_slots[1].event);
  });
  step([&] {
    if (g_slots[1].event) (void)g_slots[1].event->wait_for(2s);
  });
  step([&] { keep(2, c.record_event()); });
  step([&] {
    if (g_slots[2].event) g_slots[2].event->wait();
  });
  step([&] {
    if (profiler) (void)profiler->stop(2s);
  });
  profiler.reset();
}

// The same kinds of work from three threads at once (each on its own stream and slots), while
// the main thread sets the gate the first one waits for.
void threaded_work(ev::Stream& a, ev::Stream& b, ev::Stream& c) {
  std::optional<ev::UserEvent> gate;
  step([&] { gate.emplace(); });
  std::optional<ev::Event> gated;  // a plain handle: dropping `gate` still abandons it
  if (gate) gated = *gate;
  ev::Stream* streams[3] = {&a, &b, &c};
  std::thread threads[3];
  for (int t = 0; t < 3; ++t) {
    step([&] {
      threads[t] = std::thread([gated, s = streams[t], t] {
        const int base = 4 * t;
        step([&] {
          if (t == 0 && gated) s->wait(*gated);
        });
        step([&] { keep(base, s->enqueue("op", [base] { g_ran[static_cast<std::size_t>(base)] = true; }), base); });
        step([&] {
          if (g_slots[base].event) add_counted_callback(base, *g_slots[base].event);
        });
        step([&] { keep(base + 1, s->record_event(), g_slots[base].event ? base : -1); });
        step([&] {
          if (g_slots[base + 1].event) (void)g_slots[base + 1].event->wait_for(t == 0 ? 20ms : 2s);
        });
        step([&] {
          if (g_slots[base + 1].event) add_counted_callback(base + 1, *g_slots[base + 1].event);
        });
        step([&] { s->synchronize(); });
      });
    });
  }
  step([&] {
    if (gate) gate->set();
  });
  gate.reset();  // unset (set() failed): it fails, and what waits on it goes on
  for (std::thread& th : threads) {
    if (th.joinable()) th.join();
  }
}

// Coroutines (eventide/coro.hpp) that wait with a timeout and a stop token: each whose body
// began (its frame was allocated) ends exactly once, whether its wait finished, timed out,
// was cancelled or could not be armed (then the co_await throws).
std::array<std::atomic<int>, kSlots> g_coro_ends{};
std::array<bool, kSlots> g_coro_started{};
struct Detached {  // starts at once, frees its frame at its end
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept {}
  };
};
Detached await_counted(int i, ev::Event e, std::stop_token stop, std::chrono::milliseconds timeout) {
  g_coro_started[static_cast<std::size_t>(i)] = true;
  try {
    (void)co_await (e | ev::timeout(timeout) | ev::cancel_on(std::move(stop)));
  } catch (...) {
  }
  g_coro_ends[static_cast<std::size_t>(i)].fetch_add(1);
}
void coroutine_work(ev::Stream& a, ev::Stream&, ev::Stream&) {
  std::optional<ev::UserEvent> gate;
  std::optional<std::stop_source> stop;
  step([&] { gate.emplace(); });
  step([&] { stop.emplace(); });
  if (!gate || !stop) return;
  for (int i = 0; i < 4; ++i) {
    step([&] { await_counted(i, *gate, stop->get_token(), i == 0 ? 1ms : 10s); });  // 0 times out
  }
  step([&] { await_counted(4, a.enqueue("op", [] {}), stop->get_token(), 10s); });
  step([&] { gate->set(); });
  step([&] { await_counted(5, *gate, stop->get_token(), 10s); });  // finished: no suspension
  step([&] { std::this_thread::sleep_for(2ms); });                 // 0's timer fires meanwhile
  stop->request_stop();  // what still waits is cancelled (never allocates)
}

using Scenario = void (*)(ev::Stream&, ev::Stream&, ev::Stream&);

// After the scenario, with allocations back: every event finishes (or fails) in time; one
// that finished without error ran its op; every callback added runs exactly once; new work
// runs. Returns the child's exit code.
int check_after(long injected) {
  if (g_broken) return kChildBroken;
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (!s.event) continue;
    bool finished = false;
    try {
      finished = s.event->wait_for(10s);
    } catch (...) {
      finished = true;  // failed: fine
    }
    if (!finished) {
      fail_child("an event never finished (lost work or a lost wake-up)", i);
      return kChildBroken;
    }
    if (s.guards >= 0 && !s.event->error() && !g_ran[s.guards]) {
      fail_child("an event says finished but its work never ran", i);
      return kChildBroken;
    }
  }
  for (int i = 0; i < kSlots; ++i) {
    if (!g_callback_added[i]) continue;
    const auto end = Clock::now() + 10s;
    while (g_callback_runs[i].load() == 0 && Clock::now() < end) std::this_thread::sleep_for(100us);
    if (g_callback_runs[i].load() != 1) {
      fail_child(g_callback_runs[i].load() == 0 ? "a callback whose add_callback returned never ran"
                                                : "a callback ran more than once",
                 i);
      return kChildBroken;
    }
  }
  for (int i = 0; i < kSlots; ++i) {
    if (!g_coro_started[i]) continue;
    const auto end = Clock::now() + 10s;
    while (g_coro_ends[i].load() == 0 && Clock::now() < end) std::this_thread::sleep_for(100us);
    if (g_coro_ends[i].load() != 1) {
      fail_child(g_coro_ends[i].load() == 0 ? "a coroutine never resumed" : "a coroutine resumed twice", i);
      return kChildBroken;
    }
  }
  try {
    ev::Stream s(ev::Device::cpu());
    std::atomic<bool> ran{false};
    ev::Event e = s.enqueue("afterwards", [&] { ran = true; });
    if (!e.wait_for(10s) || !ran) {
      fail_child("new work did not run once memory was back", 0);
      return kChildBroken;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "CHILD-BROKEN: new work failed once memory was back: %s\n", e.what());
    return kChildBroken;
  }
  return injected > 0 ? kChildOk : kChildNothingInjected;
}

// std::terminate in the child: where it was called from (the throw that met a noexcept),
// for the parent's report. backtrace_symbols_fd allocates nothing.
[[noreturn]] void on_terminate() {
  disarm();
  std::fputs("CHILD-TERMINATE: std::terminate called from:\n", stderr);
  void* frames[24];
  const int n = backtrace(frames, 24);
  // The first frames are this handler and the unwinder's.
  backtrace_symbols_fd(frames + std::min(n, 7), n - std::min(n, 7), STDERR_FILENO);
  std::abort();
}

[[noreturn]] void child_main(Scenario scenario, Mode mode, long n) {
  int code = kChildBroken;
  std::set_terminate(on_terminate);
  {
    void* warm[1];
    (void)backtrace(warm, 1);  // loads the unwinder now, not while allocations fail
  }
  {
    const ev::Device cpu = ev::Device::cpu();
    // The runtime and three streams exist before the failures start; a fourth stream and
    // everything else is made while they happen.
    ev::Stream a(cpu), b(cpu), c(cpu);
    arm(mode, n);
    scenario(a, b, c);
    const long injected = disarm();
    code = check_after(injected);
  }
  if (mode == kFrom && code == kChildOk) arm(kFrom, 0);  // and exit while nothing can be allocated
  std::fflush(stdout);
  std::exit(code);  // through the runtime's shutdown at exit
}

// --- The parent ---------------------------------------------------------------------------

struct ChildResult {
  bool ok = false;
  bool nothing_injected = false;
  std::string what;  // why it failed, with the tail of its stderr
};

std::string read_tail(int fd) {
  std::string out;
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t from = size > 4096 ? size - 4096 : 0;
  lseek(fd, from, SEEK_SET);
  char buf[4096];
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(got));
  return out;
}

ChildResult run_child(Scenario scenario, Mode mode, long n, std::chrono::seconds deadline) {
  ChildResult r;
  char path[] = "/tmp/eventide-alloc-failure-XXXXXX";
  const int err = mkstemp(path);
  if (err < 0) {
    r.what = "mkstemp failed";
    return r;
  }
  unlink(path);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(err);
    r.what = "fork failed";
    return r;
  }
  if (pid == 0) {
    dup2(err, STDERR_FILENO);
    child_main(scenario, mode, n);
  }
  int status = 0;
  const auto end = Clock::now() + deadline;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < end) {
    std::this_thread::sleep_for(200us);
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    r.what = "hung (killed after " + std::to_string(deadline.count()) + " s)";
  } else if (WIFSIGNALED(status)) {
    r.what = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
             strsignal(WTERMSIG(status)) + ")";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == kChildOk) {
    r.ok = true;
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == kChildNothingInjected) {
    r.ok = true;
    r.nothing_injected = true;
  } else {
    r.what = "exited with code " + std::to_string(WEXITSTATUS(status));
  }
  if (!r.ok) r.what += "; its stderr ends with:\n" + read_tail(err);
  close(err);
  return r;
}

// Runs `scenario` for N = 0, 1, 2, ... in `mode` until three runs in a row inject nothing
// (threads make the count vary a little); fails the test at the first child that broke (the
// rest would mostly repeat it).
void sweep(Scenario scenario, Mode mode) {
  const char* mode_name = mode == kOnce ? "once" : "from";
  constexpr long kMaxRuns = 20000;  // a runaway guard: scenarios allocate far less
  long n = 0;
  long last = kMaxRuns;
  if (const char* only = std::getenv("EVENTIDE_TEST_FAIL_ALLOCATION")) {
    n = std::atol(only);  // to reproduce one run: the allocation (N) the failure reported
    last = n + 1;
  }
  int idle_runs = 0;
  for (; n < last; ++n) {
    ChildResult r = run_child(scenario, mode, n, std::chrono::seconds(30));
    if (!r.ok) {
      ADD_FAILURE() << "allocation " << n << " failing (mode " << mode_name << "): the child "
                    << r.what;
      return;
    }
    idle_runs = r.nothing_injected ? idle_runs + 1 : 0;
    if (idle_runs == 3) break;
  }
  EXPECT_LT(n, kMaxRuns) << "the scenario never ran out of allocations to fail";
  std::printf("[ sweep    ] mode %s: %ld allocations failed in turn\n", mode_name, n);
}

TEST(AllocationFailureTest, MixedWorkSurvivesEachSingleAllocationFailure) { sweep(mixed_work, kOnce); }

TEST(AllocationFailureTest, MixedWorkSurvivesExhaustionFromEachAllocationOn) { sweep(mixed_work, kFrom); }

TEST(AllocationFailureTest, WorkFromThreeThreadsSurvivesEachSingleAllocationFailure) {
  sweep(threaded_work, kOnce);
}

TEST(AllocationFailureTest, WorkFromThreeThreadsSurvivesExhaustionFromEachAllocationOn) {
  sweep(threaded_work, kFrom);
}

TEST(AllocationFailureTest, ProfiledWorkSurvivesEachSingleAllocationFailure) {
  sweep(profiled_work, kOnce);
}

TEST(AllocationFailureTest, ProfiledWorkSurvivesExhaustionFromEachAllocationOn) {
  sweep(profiled_work, kFrom);
}

TEST(AllocationFailureTest, CoroutinesSurviveEachSingleAllocationFailure) { sweep(coroutine_work, kOnce); }

TEST(AllocationFailureTest, CoroutinesSurviveExhaustionFromEachAllocationOn) { sweep(coroutine_work, kFrom); }

}  // namespace
