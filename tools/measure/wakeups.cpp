#include "wakeups.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include <eventide/eventide.hpp>

#include "measure.hpp"

namespace ev = eventide;

namespace eventide::bench {

namespace {

// A setter that sleeps `idle` before each set, so the waiter is deep asleep; `wait(i)` blocks
// until round i is set, `set(i)` sets it. Returns set-to-return times.
template <class Wait, class Set>
std::vector<double> sleeping_waiter(int rounds, std::chrono::nanoseconds idle, Wait wait, Set set) {
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

}  // namespace

std::vector<double> atomic_ping_pong(int rounds) {
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
    const auto t0 = Clock::now();
    turn.store(2 * i - 1);
    turn.notify_one();
    int x;
    while ((x = turn.load()) != 2 * i) turn.wait(x);
    v.push_back(ns_between(t0, Clock::now()) / 2);
  }
  peer.join();
  return v;
}

std::vector<double> condvar_ping_pong(int rounds) {
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
    const auto t0 = Clock::now();
    {
      std::unique_lock lock(mu);
      turn = 2 * i - 1;
    }
    cv.notify_all();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return turn == 2 * i; });
    v.push_back(ns_between(t0, Clock::now()) / 2);
  }
  peer.join();
  return v;
}

std::vector<double> spin_ping_pong(int rounds) {
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
    const auto t0 = Clock::now();
    turn.store(2 * i - 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * i) cpu_relax();
    v.push_back(ns_between(t0, Clock::now()) / 2);
  }
  peer.join();
  return v;
}

std::vector<double> atomic_sleeping(int rounds, std::chrono::nanoseconds idle) {
  std::atomic<int> round{0};
  return sleeping_waiter(
      rounds, idle,
      [&](int i) {
        int x;
        while ((x = round.load()) <= i) round.wait(x);
      },
      [&](int i) {
        round.store(i + 1);
        round.notify_one();
      });
}

std::vector<double> condvar_sleeping(int rounds, std::chrono::nanoseconds idle) {
  std::mutex mu;
  std::condition_variable cv;
  int round = 0;
  return sleeping_waiter(
      rounds, idle,
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
}

std::vector<double> atomic_handoff(int rounds, std::chrono::nanoseconds idle) {
  std::atomic<int> posted{0};           // rounds the host has handed over
  std::atomic<std::int64_t> ran_at{0};  // stamped by the "callback" on the worker
  std::vector<double> v;
  v.reserve(rounds);
  std::thread worker([&] {
    for (int i = 1; i <= rounds; ++i) {
      int x;
      while ((x = posted.load(std::memory_order_acquire)) < i) posted.wait(x);
      ran_at.store(now_ns(), std::memory_order_release);
      ran_at.notify_one();
    }
  });
  for (int i = 1; i <= rounds; ++i) {
    ran_at.store(0, std::memory_order_relaxed);
    if (idle.count() > 0) std::this_thread::sleep_for(idle);
    const std::int64_t t0 = now_ns();
    posted.store(i, std::memory_order_release);
    posted.notify_one();
    // Block rather than spin, as for eventide's callbacks below: the host must not hold the
    // core the worker needs.
    ran_at.wait(0, std::memory_order_acquire);
    v.push_back(static_cast<double>(ran_at.load(std::memory_order_acquire) - t0));
  }
  worker.join();
  return v;
}

std::vector<double> user_event_ping_pong(int rounds) {
  // Fresh events every round, made before timing starts, so no reset races the waiter.
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
    const auto t0 = Clock::now();
    ping[i].set();
    pong[i].wait();
    v.push_back(ns_between(t0, Clock::now()) / 2);
  }
  peer.join();
  return v;
}

std::vector<double> user_event_sleeping(int rounds, std::chrono::nanoseconds idle) {
  std::vector<ev::UserEvent> events(rounds);
  return sleeping_waiter(
      rounds, idle, [&](int i) { events[i].wait(); }, [&](int i) { events[i].set(); });
}

std::vector<double> user_event_callback(int rounds, std::chrono::nanoseconds idle) {
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
    if (idle.count() > 0) std::this_thread::sleep_for(idle);
    const std::int64_t t0 = now_ns();
    u.set();
    // Block rather than spin: a spinning host thread could hold the very core the callback
    // thread needs. The time is taken inside the callback, so this wake-up is not in it.
    ran_at.wait(0, std::memory_order_acquire);
    v.push_back(static_cast<double>(ran_at.load(std::memory_order_acquire) - t0));
  }
  return v;
}

std::vector<double> stream_work_wake(int rounds, std::chrono::nanoseconds body) {
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
  return v;
}

std::vector<double> idle_stream_pickup(int rounds, std::chrono::nanoseconds idle) {
  ev::Stream s(ev::Device::cpu());
  std::atomic<std::int64_t> started_at{0};
  std::vector<double> v;
  v.reserve(rounds);
  for (int i = 0; i < rounds; ++i) {
    std::this_thread::sleep_for(idle);
    const std::int64_t t0 = now_ns();
    ev::Event e = s.enqueue("stamp", [&started_at] {
      started_at.store(now_ns(), std::memory_order_release);
    });
    e.wait();
    v.push_back(static_cast<double>(started_at.load(std::memory_order_acquire) - t0));
  }
  return v;
}

}  // namespace eventide::bench
