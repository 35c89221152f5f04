// Concurrency: the same bodies at 1, 2, 3, 7 and 16 threads, each under a deadline, so that
// a lost wake-up or a deadlock fails the test instead of hanging it. Under ThreadSanitizer
// these also check that the library's own synchronization orders what the tests read.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace eventide_test;

constexpr int kN = 256;  // elements of the tensor shared by readers and a writer

// --- Shared events -----------------------------------------------------------------------

TEST(ConcurrencyTest, SharedEventsRecordPollWaitAndResetInPhases) {
  for_thread_counts([](int threads) {
    constexpr int kEvents = 4;
    std::vector<ev::Event> shared(kEvents);
    const int rounds = std::max(2, iterations(60) / threads);
    Latch start(threads);
    std::vector<std::unique_ptr<Latch>> phase;
    for (int i = 0; i < 3 * rounds; ++i) phase.push_back(std::make_unique<Latch>(threads));
    run_threads(threads, [&](int id) {
      ev::Stream s;
      ev::StreamGuard g(s);
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        // Phase 1: everyone records (ready and pending work) and polls, concurrently.
        for (int k = 0; k < kEvents; ++k) {
          ev::Tensor t = ev::full({8}, static_cast<double>(id));
          shared[static_cast<std::size_t>((id + k) % kEvents)].record(t);
          (void)shared[static_cast<std::size_t>(k)].poll();
          (void)shared[static_cast<std::size_t>(k)].status();
          (void)shared[static_cast<std::size_t>(k)].str();
        }
        phase[static_cast<std::size_t>(3 * r)]->arrive_and_wait();
        // Phase 2: everyone waits on every event, concurrently; no more records.
        for (auto& e : shared) {
          if (id % 2 == 0) {
            e.wait();
          } else {
            while (!e.wait_for(std::chrono::microseconds(50 * (id + 1)))) {
            }
          }
          EXPECT_TRUE(e.poll());
          EXPECT_EQ(e.error(), nullptr);
          EXPECT_GE(e.time_elapsed().count(), 0.0);
        }
        phase[static_cast<std::size_t>(3 * r + 1)]->arrive_and_wait();
        // Phase 3: everyone resets (finished or already empty: never a state error).
        for (auto& e : shared) e.reset();
        EXPECT_FALSE(shared[static_cast<std::size_t>(id % kEvents)].poll());
        phase[static_cast<std::size_t>(3 * r + 2)]->arrive_and_wait();
      }
    });
    for (auto& e : shared) EXPECT_EQ(e.status(), ev::EventStatus::empty);
  });
}

TEST(ConcurrencyTest, ManyThreadsWaitOnOneEventAndAllWake) {
  for_thread_counts([](int threads) {
    for (int round = 0; round < iterations(50); ++round) {
      ev::UserEvent gate;
      ev::Stream s = gated_stream(gate);
      ev::Event e = s.enqueue("held", [] {});
      Latch ready(threads + 1);
      std::atomic<int> woken{0};
      std::thread setter([&] {
        ready.arrive_and_wait();
        gate.set();
      });
      run_threads(threads, [&](int id) {
        ready.arrive_and_wait();
        if (id % 3 == 0) {
          e.wait();
        } else if (id % 3 == 1) {
          while (!e.wait_for(std::chrono::microseconds(id * 7))) {
          }
        } else {
          ev::wait_all({e});
        }
        EXPECT_TRUE(e.poll());
        woken.fetch_add(1);
      });
      setter.join();
      EXPECT_EQ(woken.load(), threads);
    }
  });
}

TEST(ConcurrencyTest, CallbacksOnASharedEventAddedFromManyThreadsEachRunOnce) {
  for_thread_counts([](int threads) {
    const int per_thread = std::max(20, iterations(1'000) / threads);
    SharedCount calls = make_count();
    for (int round = 0; round < 3; ++round) {
      ev::UserEvent gate;
      ev::Stream held = gated_stream(gate);
      ev::Event shared;
      Latch recorded(threads);
      run_threads(threads, [&](int id) {
        ev::Stream s;
        ev::StreamGuard g(s);
        // Every record happens before any callback is added (a record racing the posting of
        // callbacks is the bug in CallbacksAndRecordsOnASharedEventFromManyThreads).
        shared.record(ev::full({4}, static_cast<double>(id)));
        if (id == 0) shared.record(held);  // keeps it pending until the gate is set
        recorded.arrive_and_wait();
        for (int i = 0; i < per_thread; ++i) {
          shared.add_callback([calls] { calls->fetch_add(1); });
          (void)shared.poll();
          if (id == 0 && i == per_thread / 2) gate.set();  // completes while others add
        }
      });
    }
    const int want = 3 * per_thread * threads;
    EXPECT_TRUE(wait_for_count(*calls, want)) << calls->load() << " of " << want;
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(calls->load(), want);
  });
}

// Regression test; this used to fail: data race (ThreadSanitizer) on EventState::device_. EventState::run()
// (src/core/event.cpp) posts callbacks with `Runtime::get().dispatcher(device_)` after
// releasing mu_, while record() (and reset(), via clear_locked) writes device_ under mu_ on
// another thread. TSan: "Write of size 1 ... EventState::record ... event.cpp (device_ =
// device)" vs "Previous read ... Runtime::dispatcher ... EventState::run ...
// on_armed_fence_passed". A plain build passes (the value written is usually the same), but it
// is undefined behaviour and after a reset() a callback can be posted to the wrong device's
// thread. Fix: read device_ into Actions under the lock.
TEST(ConcurrencyTest, CallbacksAndRecordsOnASharedEventFromManyThreads) {
  for_thread_counts([](int threads) {
    ev::Event shared;
    shared.record(ev::ones({1}));
    const int per_thread = std::max(20, iterations(1'000) / threads);
    SharedCount calls = make_count();
    run_threads(threads, [&](int id) {
      ev::Stream s;
      ev::StreamGuard g(s);
      for (int i = 0; i < per_thread; ++i) {
        if ((i + id) % 2 == 0) {
          shared.record(ev::full({4}, static_cast<double>(i)));  // pending for a moment
        } else {
          shared.record(s);
        }
        shared.add_callback([calls] { calls->fetch_add(1); });
        (void)shared.poll();
      }
    });
    const int want = per_thread * threads;
    EXPECT_TRUE(wait_for_count(*calls, want)) << calls->load() << " of " << want;
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(calls->load(), want);
  });
}

TEST(ConcurrencyTest, StreamsWaitOnEventsOtherThreadsRecord) {
  for_thread_counts([](int threads) {
    const int rounds = std::max(10, iterations(300) / threads);
    std::vector<ev::Event> latest(static_cast<std::size_t>(threads));
    for (auto& e : latest) e.record(ev::ones({1}));
    std::mutex mu;  // guards the vector slots (the events themselves are thread-safe)
    run_threads(threads, [&](int id) {
      ev::Stream s;
      ev::StreamGuard g(s);
      for (int r = 0; r < rounds; ++r) {
        ev::Event other;
        {
          std::lock_guard lock(mu);
          other = latest[static_cast<std::size_t>((id + 1) % threads)];
        }
        s.wait(other);
        ev::Tensor t = ev::full({16}, static_cast<double>(r));
        ev::Event mine;
        mine.record(t);
        {
          std::lock_guard lock(mu);
          latest[static_cast<std::size_t>(id)] = mine;
        }
        if (r % 16 == 0) ASSERT_EQ(t.to_vector<float>(), std::vector<float>(16, static_cast<float>(r)));
      }
      s.synchronize();
      EXPECT_EQ(s.error(), nullptr);
    });
  });
}

// Regression test; this used to fail: lost wake-up when waits, records and resets of one event race (see
// EventTest.WaiterIsWokenWhenAnotherThreadRecordsAgainAfterCompletion): a waiter
// woken by a completion that another thread's record() turns back into PENDING parks again
// without being registered (src/core/event.cpp, EventState::wait_until), and nobody wakes it
// when the new work finishes: wait() hangs (the deadline aborts the test). The contract says
// every member may be called from any number of threads at once; a wait must return once the
// event has finished. (Until 808f634 a reset() finding the event pending also self-deadlocked
// here.)
TEST(ConcurrencyTest, SharedEventsRecordPollWaitAndResetAllAtOnce) {
  for_thread_counts([](int threads) {
    constexpr int kEvents = 3;
    std::vector<ev::Event> shared(kEvents);
    for (auto& e : shared) e.record(ev::ones({1}));
    const int per_thread = std::max(20, iterations(2000) / threads);
    run_threads(threads, [&](int id) {
      ev::Stream s;
      ev::StreamGuard g(s);
      std::mt19937 rng(static_cast<unsigned>(id));
      for (int i = 0; i < per_thread; ++i) {
        ev::Event& e = shared[rng() % kEvents];
        switch (rng() % 4) {
          case 0:
            e.record(ev::ones({4}));
            break;
          case 1:
            (void)e.poll();
            break;
          case 2:
            try {
              e.wait();  // must return: the only work ever tied finishes
            } catch (const ev::StateError&) {
              // reset by another thread (empty): a state error, not a hang
            }
            break;
          case 3:
            try {
              e.reset();
            } catch (const ev::StateError&) {
              // pending: expected
            }
            break;
        }
      }
    });
    ev::synchronize();
  });
}

// --- One stream, many threads --------------------------------------------------------------

TEST(ConcurrencyTest, ManyThreadsEnqueueOnOneStreamInAnOrderConsistentWithEachThreads) {
  for_thread_counts([](int threads) {
    ev::Stream s;
    const int per_thread = std::max(50, iterations(6000) / threads);
    // Touched only by the stream's ops: they run one after another, so no lock is needed
    // (ThreadSanitizer checks that the stream really orders them).
    std::vector<std::pair<int, int>> order;
    order.reserve(static_cast<std::size_t>(threads * per_thread));
    run_threads(threads, [&](int id) {
      for (int i = 0; i < per_thread; ++i) {
        s.enqueue("append", [&order, id, i] { order.emplace_back(id, i); });
      }
    });
    s.synchronize();
    ASSERT_EQ(order.size(), static_cast<std::size_t>(threads * per_thread));
    std::vector<int> next(static_cast<std::size_t>(threads), 0);
    for (auto [id, i] : order) {
      ASSERT_EQ(i, next[static_cast<std::size_t>(id)]) << "thread " << id << "'s ops reordered";
      ++next[static_cast<std::size_t>(id)];
    }
  });
}

TEST(ConcurrencyTest, ManyThreadsRunOpsOnTheDefaultStreamAndTheirOwn) {
  for_thread_counts([](int threads) {
    run_threads(threads, [&](int id) {
      ev::Stream own;
      for (int i = 0; i < std::max(5, iterations(40) / threads); ++i) {
        ev::Tensor a = ev::full({8, 8}, 1.0);  // default stream, shared by all threads
        ev::Tensor b;
        {
          ev::StreamGuard g(own);
          b = ev::matmul(a, ev::full({8, 8}, static_cast<double>(id)));
        }
        auto v = b.to_vector<float>();
        ASSERT_EQ(v, std::vector<float>(64, 8.0f * static_cast<float>(id)));
      }
    });
  });
}

// --- Tensors used from many streams --------------------------------------------------------

TEST(ConcurrencyTest, ReadersOnManyStreamsAlwaysSeeACompleteWrite) {
  for_thread_counts([](int threads) {
    ev::Tensor shared = ev::zeros({kN});
    const int rounds = std::max(10, iterations(200) / threads);
    std::atomic<int> torn{0};
    run_threads(threads + 1, [&](int id) {
      ev::Stream s;
      ev::StreamGuard g(s);
      for (int r = 0; r < rounds; ++r) {
        if (id == 0) {
          // The writer: host code on its stream writing the whole tensor with one value.
          s.enqueue(
              "write",
              [shared, r] {
                float* p = shared.data<float>();
                for (int i = 0; i < kN; ++i) p[i] = static_cast<float>(r);
              },
              {}, {shared});
        } else {
          // Readers: an op and host code on other streams; each must see one write whole.
          ev::Tensor copy = ev::add(shared, ev::zeros({kN}));
          s.enqueue(
              "check",
              [shared, &torn] {
                const float* p = shared.data<float>();
                for (int i = 1; i < kN; ++i) {
                  if (p[i] != p[0]) {
                    torn.fetch_add(1);
                    break;
                  }
                }
              },
              {shared});
          auto v = copy.to_vector<float>();
          if (std::count(v.begin(), v.end(), v[0]) != kN) torn.fetch_add(1);
        }
      }
      s.synchronize();
    });
    EXPECT_EQ(torn.load(), 0) << "an op saw a half-written tensor";
    EXPECT_EQ(shared.to_vector<float>(), std::vector<float>(kN, static_cast<float>(rounds - 1)));
  });
}

// --- Lost wake-ups ---------------------------------------------------------------------------

TEST(ConcurrencyTest, PingPongThroughUserEventsNeverLosesAWakeUp) {
  run_with_deadline([] {
    const int rounds = iterations(10'000);
    ev::UserEvent ping, pong;
    std::thread other([&] {
      for (int i = 0; i < rounds; ++i) {
        ping.wait();
        ping.reset();
        pong.set();
      }
    });
    for (int i = 0; i < rounds; ++i) {
      ping.set();
      pong.wait();
      pong.reset();
    }
    other.join();
  });
}

// Mostly timeouts of 1-16 µs that race the other thread's set(), and now and then a longer
// one, so that on a loaded machine the waiters also sleep instead of only spinning.
std::chrono::microseconds tiny_or_long(int i) {
  return std::chrono::microseconds(i % 4 == 0 ? 2000 : 1 + i % 16);
}

TEST(ConcurrencyTest, PingPongWithTimedWaitsNeverLosesAWakeUp) {
  run_with_deadline([] {
    const int rounds = iterations(10'000);
    ev::UserEvent ping, pong;
    std::thread other([&] {
      for (int i = 0; i < rounds; ++i) {
        while (!ping.wait_for(tiny_or_long(i))) {
        }
        ping.reset();
        pong.set();
      }
    });
    for (int i = 0; i < rounds; ++i) {
      ping.set();
      while (!pong.wait_for(tiny_or_long(i + 1))) {
      }
      pong.reset();
    }
    other.join();
  });
}

TEST(ConcurrencyTest, TokenPassesRoundARingOfThreads) {
  for_thread_counts([](int threads) {
    // token[i] is thread i's turn; each hop: wait for mine, reset it, hand the token on.
    const int laps = std::max(20, iterations(10'000) / threads);
    std::vector<ev::UserEvent> token(static_cast<std::size_t>(threads));
    token[0].set();
    std::atomic<int> hops{0};
    run_threads(threads, [&](int id) {
      auto& mine = token[static_cast<std::size_t>(id)];
      auto& next = token[static_cast<std::size_t>((id + 1) % threads)];
      for (int lap = 0; lap < laps; ++lap) {
        mine.wait();
        mine.reset();
        hops.fetch_add(1);
        next.set();
      }
    });
    EXPECT_EQ(hops.load(), laps * threads);
  });
}

TEST(ConcurrencyTest, StreamGatedPingPongNeverLosesAWakeUp) {
  run_with_deadline([] {
    // Each round a stream worker parks on a UserEvent set from the host: the worker side of
    // the wake-up path.
    const int rounds = iterations(10'000);
    ev::Stream s;
    std::atomic<int> ran{0};
    for (int i = 0; i < rounds; ++i) {
      ev::UserEvent go;
      s.wait(go);
      ev::Event done = s.enqueue("step", [&] { ran.fetch_add(1); });
      if (i % 2) std::this_thread::yield();
      go.set();
      done.wait();
    }
    EXPECT_EQ(ran.load(), rounds);
  });
}

TEST(ConcurrencyTest, WaitForWithTinyTimeoutsRacingCompletionIsNeverWrong) {
  for_thread_counts([](int threads) {
    const int per_thread = std::max(200, iterations(10'000) / threads);
    std::atomic<int> wrong{0};
    run_threads(threads, [&](int id) {
      std::mt19937 rng(static_cast<unsigned>(id) * 7919u + 1u);
      // Host-set events: a helper thread sets them while this one polls with tiny timeouts.
      std::vector<ev::UserEvent> users(static_cast<std::size_t>(per_thread / 2));
      std::thread setter([&] {
        std::mt19937 r2(static_cast<unsigned>(id) + 99u);
        for (auto& u : users) {
          for (unsigned spin = r2() % 200; spin > 0; --spin) std::atomic_signal_fence(std::memory_order_seq_cst);
          u.set();
        }
      });
      for (auto& u : users) {
        for (;;) {
          const bool done = u.wait_for(std::chrono::nanoseconds(rng() % 20'000));
          if (done) {
            if (!u.poll()) wrong.fetch_add(1);
            break;
          }
        }
      }
      setter.join();
      // Device work: stream ops finishing while this thread waits with tiny timeouts.
      ev::Stream s;
      for (int i = 0; i < per_thread / 2; ++i) {
        ev::Event e = s.enqueue("tiny", [] {});
        for (;;) {
          const bool done = e.wait_for(std::chrono::nanoseconds(rng() % 20'000));
          if (done) {
            if (!e.poll() || !s.query()) wrong.fetch_add(1);
            break;
          }
          if (e.poll() && rng() % 2) break;  // sometimes give up after seeing it done
        }
      }
    });
    EXPECT_EQ(wrong.load(), 0) << "wait_for returned true for an unfinished event";
  });
}

TEST(ConcurrencyTest, WaitAnyRacingCompletionReturnsAFinishedEvent) {
  for_thread_counts([](int threads) {
    const int per_thread = std::max(50, iterations(2'000) / threads);
    std::atomic<int> wrong{0};
    run_threads(threads, [&](int) {
      ev::Stream a, b;
      for (int i = 0; i < per_thread; ++i) {
        std::array<ev::Event, 2> es{a.enqueue("a", [] {}), b.enqueue("b", [] {})};
        std::optional<std::size_t> got;
        while (!(got = ev::wait_any(es, std::chrono::microseconds(i % 5)))) {
        }
        if (!es[*got].poll()) wrong.fetch_add(1);
        if (!ev::wait_all_for(es, std::chrono::seconds(30))) wrong.fetch_add(1);
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  });
}

// --- Streams and guards from many threads ----------------------------------------------------

TEST(ConcurrencyTest, StreamsAndGuardsFromManyThreads) {
  for_thread_counts([](int threads) {
    std::atomic<int> mismatched{0};
    run_threads(threads, [&](int) {
      for (int i = 0; i < std::max(10, iterations(200) / threads); ++i) {
        ev::Stream s;
        ev::StreamGuard g(s);
        if (!(ev::Stream::current() == s)) mismatched.fetch_add(1);
        {
          ev::Stream inner;
          ev::StreamGuard g2(inner);
          if (!(ev::Stream::current() == inner)) mismatched.fetch_add(1);
          ev::Event e = inner.record_event();
          e.wait();
        }
        if (!(ev::Stream::current() == s)) mismatched.fetch_add(1);
        if (!(ev::Stream::default_stream() == ev::Stream::default_stream())) mismatched.fetch_add(1);
      }
      if (!(ev::Stream::current() == ev::Stream::default_stream())) mismatched.fetch_add(1);
    });
    EXPECT_EQ(mismatched.load(), 0);
  });
}

}  // namespace
