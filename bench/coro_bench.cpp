// bench/coro_bench.cpp: C++ coroutines (eventide/coro.hpp) beside what a user writes
// without them, measured the same way in the same run.
//
// * Resume latency, p50 and p99: from just before UserEvent::set() (or just before a tiny op
//   is enqueued on the device) to the first line after the co_await, beside the same moment
//   to the first line of an add_callback callback (the floor: a coroutine resumes inside one),
//   and to the return of std::future::get() on a thread waiting for a promise that such a
//   callback sets (the hand-off a coroutine saves). Hot (back to back) and idle (the callback
//   thread asleep 200 us first); and resumed through resume_on(a one-thread pool).
// * 10,000 coroutines suspended on one UserEvent: heap bytes per waiter (glibc's mallinfo2,
//   the coroutine's frame, the wait and its callback), and the time from set() to the last
//   resume, beside 10,000 add_callback callbacks on one UserEvent (their bytes and the time to
//   the last callback).
//
// Usage: eventide_bench_coro [--quick] [--device=cpu|cuda:0]  (the op rows' device; default:
// the default device). EVENTIDE_BENCH_QUICK=1: --quick.
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <eventide/coro.hpp>
#include <eventide/eventide.hpp>

#include "measure/measure.hpp"
#include "measure/one_thread_pool.hpp"

namespace ev = eventide;
namespace mb = eventide::bench;

namespace {

// A coroutine that starts at once and frees its frame at its end: what a server spawns.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::abort(); }
  };
};

void stamp(std::atomic<std::int64_t>& at) {
  at.store(mb::now_ns(), std::memory_order_release);
  at.notify_one();
}
// Blocks (not spinning: that could hold the core the callback thread needs) for the stamp.
std::int64_t wait_stamp(std::atomic<std::int64_t>& at) {
  at.wait(0, std::memory_order_acquire);
  return at.load(std::memory_order_acquire);
}

template <class A>
Detached resume_and_stamp(A awaitable, std::atomic<std::int64_t>* at) {
  co_await std::move(awaitable);
  stamp(*at);
}

// How the waiting side learns of the completion: the three rows of each measurement.
enum class Way { coroutine, callback, future };
const char* way_name(Way w) {
  switch (w) {
    case Way::coroutine: return "co_await";
    case Way::callback: return "add_callback";
    case Way::future: return "callback->promise->future.get";
  }
  return "?";
}

// Registers the waiter of `way` on `e`; returns the time it saw the completion.
struct Waiter {
  std::atomic<std::int64_t> at{0};
  std::thread getter;
  void start(Way way, ev::Event e) {
    at.store(0, std::memory_order_relaxed);
    if (way == Way::coroutine) {
      resume_and_stamp(e, &at);
    } else if (way == Way::callback) {
      e.add_callback([this] { stamp(at); });
    } else {
      auto promise = std::make_shared<std::promise<void>>();
      std::future<void> future = promise->get_future();
      e.add_callback([promise] { promise->set_value(); });
      getter = std::thread([this, f = std::move(future)]() mutable {
        f.get();
        stamp(at);
      });
    }
  }
  std::int64_t finish() {
    const std::int64_t t = wait_stamp(at);
    if (getter.joinable()) getter.join();
    return t;
  }
};

std::vector<double> user_event_rounds(Way way, int rounds, std::chrono::nanoseconds idle) {
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(rounds));
  for (int i = 0; i < rounds; ++i) {
    ev::UserEvent u;
    Waiter w;
    w.start(way, u);
    // The future's thread must be asleep in get() before the clock starts.
    std::this_thread::sleep_for(idle.count() > 0 ? idle : std::chrono::nanoseconds(way == Way::future ? 50'000 : 0));
    const std::int64_t t0 = mb::now_ns();
    u.set();
    v.push_back(static_cast<double>(w.finish() - t0));
  }
  return v;
}

std::vector<double> op_rounds(Way way, int rounds, ev::Device device) {
  ev::Tensor x = ev::ones({1}, ev::DType::f32, device);
  x.wait();
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(rounds));
  for (int i = 0; i < rounds; ++i) {
    ev::UserEvent gate;  // holds the op until the waiter is registered (and asleep)
    ev::Stream s(device);
    s.wait(gate);
    ev::Tensor y;
    {
      ev::StreamGuard g(s);
      y = ev::add(x, x);
    }
    ev::Event e;
    e.record(y);
    Waiter w;
    w.start(way, e);
    if (way == Way::future) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const std::int64_t t0 = mb::now_ns();
    gate.set();  // the op runs now: released, run and finished on the device
    v.push_back(static_cast<double>(w.finish() - t0));
  }
  return v;
}

using eventide::bench::OneThreadPool;  // a one-thread executor, as a server's pool would be
using eventide::bench::PoolRef;

std::vector<double> resume_on_rounds(int rounds) {
  OneThreadPool pool;
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(rounds));
  for (int i = 0; i < rounds; ++i) {
    ev::UserEvent u;
    std::atomic<std::int64_t> at{0};
    resume_and_stamp(u | ev::resume_on(PoolRef{&pool}), &at);
    const std::int64_t t0 = mb::now_ns();
    u.set();
    v.push_back(static_cast<double>(wait_stamp(at) - t0));
  }
  return v;
}

void report(const std::string& key, const std::string& what, std::vector<double> ns) {
  const mb::Dist d = mb::dist(std::move(ns));
  std::printf("%-40s p50 %9.1f  p99 %9.1f  ns  (%s)\n", key.c_str(), d.p50, d.p99, what.c_str());
  std::fflush(stdout);
}

std::size_t heap_in_use() { return mallinfo2().uordblks; }

// Many waiters on one UserEvent: bytes each, and set() -> the last one's resume.
struct Crowd {
  double bytes_per_waiter;
  double ms_to_last;
};
Detached count_and_stamp(ev::Event e, std::atomic<int>* left, std::atomic<std::int64_t>* last) {
  co_await e;
  if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) stamp(*last);
}
Crowd crowd(Way way, int n) {
  ev::UserEvent u;
  std::atomic<int> left{n};
  std::atomic<std::int64_t> last{0};
  const std::size_t before = heap_in_use();
  for (int i = 0; i < n; ++i) {
    if (way == Way::coroutine) {
      count_and_stamp(u, &left, &last);
    } else {
      u.add_callback([&left, &last] {
        if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) stamp(last);
      });
    }
  }
  const std::size_t after = heap_in_use();
  const std::int64_t t0 = mb::now_ns();
  u.set();
  const std::int64_t t1 = wait_stamp(last);
  return {static_cast<double>(after - before) / n, static_cast<double>(t1 - t0) / 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  const char* quick_env = std::getenv("EVENTIDE_BENCH_QUICK");
  bool quick = quick_env && *quick_env && std::strcmp(quick_env, "0") != 0;
  ev::Device device = ev::default_device();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strncmp(argv[i], "--device=", 9) == 0) {
      device = ev::Device(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--device=NAME]\n", argv[0]);
      return 2;
    }
  }
  const int hot = quick ? 2000 : 10000;
  const int idle = quick ? 300 : 2000;
  const int crowd_size = 10000;

  ev::Tensor warm = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  warm.wait();

  for (Way w : {Way::coroutine, Way::callback, Way::future}) {
    report(std::string("user_event.hot.") + way_name(w), "UserEvent::set -> the waiter runs, back to back",
           user_event_rounds(w, w == Way::future ? hot / 5 : hot, std::chrono::nanoseconds(0)));
  }
  for (Way w : {Way::coroutine, Way::callback, Way::future}) {
    report(std::string("user_event.idle.") + way_name(w), "UserEvent::set -> the waiter runs, threads asleep 200 us",
           user_event_rounds(w, idle, std::chrono::microseconds(200)));
  }
  for (Way w : {Way::coroutine, Way::callback, Way::future}) {
    report(std::string("op.") + device.str() + "." + way_name(w),
           "a 1-element add released on its stream -> the waiter runs", op_rounds(w, w == Way::future ? hot / 5 : hot, device));
  }
  report("user_event.resume_on_pool.co_await", "UserEvent::set -> resumed on a one-thread pool (resume_on)",
         resume_on_rounds(hot));

  for (int round = 0; round < 2; ++round) {  // the first round also warms the heap
    const Crowd c = crowd(Way::coroutine, crowd_size);
    const Crowd a = crowd(Way::callback, crowd_size);
    if (round == 0) continue;
    std::printf("%d coroutines on one UserEvent: %6.0f bytes per waiter, set -> last resume %7.2f ms\n",
                crowd_size, c.bytes_per_waiter, c.ms_to_last);
    std::printf("%d add_callback on one UserEvent: %6.0f bytes per callback, set -> last callback %7.2f ms\n",
                crowd_size, a.bytes_per_waiter, a.ms_to_last);
  }
  return 0;
}
