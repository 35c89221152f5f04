// wait_all / wait_all_for / wait_any over several events, and synchronize() /
// synchronize(Device), which wait for every stream, also those no handle refers to any more.
#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace eventide_test;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// `count` events, each tied to work held back by its own UserEvent gate.
struct HeldEvents {
  explicit HeldEvents(int count) {
    for (int i = 0; i < count; ++i) {
      gates.emplace_back();
      streams.push_back(gated_stream(gates.back()));
      events.push_back(streams.back().enqueue("held " + std::to_string(i), [] {}));
    }
  }
  std::vector<ev::UserEvent> gates;
  std::vector<ev::Stream> streams;
  std::vector<ev::Event> events;
};

// Sets gates[i] after delays[i] on a thread of its own; join() before the gates go.
class DelayedSetter {
 public:
  DelayedSetter(std::vector<ev::UserEvent> gates, std::vector<std::chrono::milliseconds> delays)
      : thread_([gates = std::move(gates), delays = std::move(delays)]() mutable {
          auto t0 = Clock::now();
          for (std::size_t i = 0; i < gates.size(); ++i) {
            std::this_thread::sleep_until(t0 + delays[i]);
            gates[i].set();
          }
        }) {}
  ~DelayedSetter() { thread_.join(); }

 private:
  std::thread thread_;
};

TEST(WaitTest, WaitAllWaitsForEveryEvent) {
  run_with_deadline([] {
    HeldEvents h(3);
    DelayedSetter setter({h.gates[2], h.gates[0], h.gates[1]}, {10ms, 20ms, 30ms});
    ev::wait_all(h.events);
    for (const auto& e : h.events) EXPECT_TRUE(e.poll());
  });
}

TEST(WaitTest, WaitAllOfFinishedOrNoEventsReturnsAtOnce) {
  run_with_deadline([] {
    ev::Event a, b;
    a.record(ev::ones({1}));
    b.record(ev::zeros({1}));
    ev::wait_all({a, b});
    EXPECT_TRUE(a.poll() && b.poll());
    // Assumption (the header is silent): an empty list has nothing to wait for.
    EXPECT_NO_THROW(ev::wait_all(std::span<const ev::Event>()));
    EXPECT_TRUE(ev::wait_all_for(std::span<const ev::Event>(), 0ns));
  });
}

TEST(WaitTest, WaitAllRethrowsTheFirstFailureInListOrderOnceAllHaveFinished) {
  run_with_deadline([] {
    ev::Stream s1, s2;
    ev::Event ok;
    ok.record(ev::ones({1}));
    ev::Event first = s1.enqueue("first", [] { throw UserError("first failure"); });
    ev::Event second = s2.enqueue("second", [] { throw UserError("second failure"); });
    HeldEvents h(1);
    DelayedSetter setter({h.gates[0]}, {30ms});
    auto err = capture([&] { ev::wait_all({ok, second, first, h.events[0]}); });
    EXPECT_TRUE(h.events[0].poll()) << "wait_all threw before every event had finished";
    ASSERT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_EQ(what(op_cause(err)), "second failure") << "not the first failure in list order";
  });
}

TEST(WaitTest, WaitAllRethrowsTheUsersOwnExceptionOfAUserEvent) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.fail(std::make_exception_ptr(UserError("mine")));
    EXPECT_THROW(ev::wait_all({u}), UserError);
    EXPECT_THROW((void)ev::wait_all_for({u}, 1s), UserError);
  });
}

TEST(WaitTest, WaitAllForTimesOutThenSucceeds) {
  run_with_deadline([] {
    HeldEvents h(2);
    h.gates[0].set();
    auto t0 = Clock::now();
    EXPECT_FALSE(ev::wait_all_for(h.events, 30ms));
    const double waited = ms_since(t0);
    EXPECT_GE(waited, 29.0);
    EXPECT_LT(waited, 5000.0);
    EXPECT_FALSE(ev::wait_all_for(h.events, 0ns));
    h.gates[1].set();
    EXPECT_TRUE(ev::wait_all_for(h.events, 30s));
    EXPECT_TRUE(ev::wait_all_for({h.events[0], h.events[1]}, 0ns));
  });
}

TEST(WaitTest, WaitAllForRethrowsAFailure) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event bad = s.enqueue("bad", [] { throw UserError("x"); });
    EXPECT_THROW((void)ev::wait_all_for({bad}, 30s), ev::OpError);
  });
}

TEST(WaitTest, WaitAnyReturnsTheLowestFinishedIndex) {
  run_with_deadline([] {
    HeldEvents h(4);
    h.gates[3].set();
    h.gates[1].set();
    h.events[3].wait();
    h.events[1].wait();
    EXPECT_EQ(ev::wait_any(h.events), std::optional<std::size_t>(1));
    EXPECT_EQ(ev::wait_any(h.events, 0ns), std::optional<std::size_t>(1));
    h.gates[0].set();
    h.events[0].wait();
    EXPECT_EQ(ev::wait_any(h.events), std::optional<std::size_t>(0));
    h.gates[2].set();
  });
}

TEST(WaitTest, WaitAnyBlocksUntilOneFinishes) {
  run_with_deadline([] {
    HeldEvents h(3);
    DelayedSetter setter({h.gates[2]}, {20ms});
    auto t0 = Clock::now();
    EXPECT_EQ(ev::wait_any(h.events), std::optional<std::size_t>(2));
    EXPECT_GE(ms_since(t0), 15.0);
    EXPECT_FALSE(h.events[0].poll());
    h.gates[0].set();
    h.gates[1].set();
  });
}

TEST(WaitTest, WaitAnyReturnsNulloptOnTimeout) {
  run_with_deadline([] {
    HeldEvents h(2);
    auto t0 = Clock::now();
    EXPECT_EQ(ev::wait_any(h.events, 30ms), std::nullopt);
    const double waited = ms_since(t0);
    EXPECT_GE(waited, 29.0);
    EXPECT_LT(waited, 5000.0);
    EXPECT_EQ(ev::wait_any(h.events, 0ns), std::nullopt);
    h.gates[1].set();
    EXPECT_EQ(ev::wait_any(h.events, 30s), std::optional<std::size_t>(1));
    h.gates[0].set();
  });
}

TEST(WaitTest, WaitAnyCountsAFailedEventAsFinishedAndDoesNotThrow) {
  run_with_deadline([] {
    HeldEvents h(1);
    ev::Stream s;
    ev::Event bad = s.enqueue("bad", [] { throw UserError("x"); });
    std::optional<std::size_t> i;
    EXPECT_NO_THROW(i = ev::wait_any({h.events[0], bad}));
    EXPECT_EQ(i, std::optional<std::size_t>(1));
    EXPECT_NE(bad.error(), nullptr);
    h.gates[0].set();
  });
}

TEST(WaitTest, SynchronizeWaitsForEveryStreamIncludingDroppedOnes) {
  run_with_deadline([] {
    std::atomic<int> done{0};
    ev::UserEvent gate;
    {
      // Streams whose handles are all gone before synchronize() is called.
      for (int i = 0; i < 4; ++i) {
        ev::Stream s;
        s.enqueue("slow", [&] {
          std::this_thread::sleep_for(20ms);
          done.fetch_add(1);
        });
      }
      ev::Stream held = gated_stream(gate);
      held.enqueue("held", [&] { done.fetch_add(1); });
    }
    // And the default stream.
    ev::Stream::default_stream().enqueue("default", [&] {
      std::this_thread::sleep_for(10ms);
      done.fetch_add(1);
    });
    DelayedSetter setter({gate}, {40ms});
    ev::synchronize();
    EXPECT_EQ(done.load(), 6);
  });
}

TEST(WaitTest, SynchronizeOfADeviceWaitsForItsStreams) {
  run_with_deadline([] {
    std::atomic<int> done{0};
    std::vector<ev::Stream> streams(3);
    for (auto& s : streams) {
      s.enqueue("slow", [&] {
        std::this_thread::sleep_for(15ms);
        done.fetch_add(1);
      });
    }
    streams.clear();  // dropped too
    ev::synchronize(ev::Device::cpu());
    EXPECT_EQ(done.load(), 3);
    ev::synchronize("cpu");
  });
}

TEST(WaitTest, SynchronizeDoesNotThrowForFailedOps) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event bad = s.enqueue("bad", [] { throw UserError("x"); });
    EXPECT_NO_THROW(ev::synchronize());
    EXPECT_TRUE(bad.poll());
    EXPECT_NO_THROW(ev::synchronize(ev::Device::cpu()));
  });
}

TEST(WaitTest, SynchronizeWithNothingPendingReturns) {
  run_with_deadline([] {
    ev::synchronize();
    ev::synchronize();
  });
}

}  // namespace

namespace {

// Regression (issue 10): timeouts beyond what nanoseconds hold overflowed in the conversion
// and the waits returned false at once. They mean "no limit".
TEST(WaitTest, HugeTimeoutsMeanNoLimitNotAnOverflow) {
  run_with_deadline([] {
    using std::chrono::duration;
    auto later = [](ev::UserEvent u) {
      return std::thread([u]() mutable {
        std::this_thread::sleep_for(30ms);
        u.set();
      });
    };
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_TRUE(u.wait_for(std::chrono::hours::max()));
      t.join();
    }
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_TRUE(u.wait_for(std::chrono::seconds::max()));
      t.join();
    }
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_TRUE(u.wait_for(duration<double>(1e300)));
      t.join();
    }
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_TRUE(u.wait_for(duration<double>(std::numeric_limits<double>::quiet_NaN())));
      t.join();
    }
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_TRUE(ev::wait_all_for({u}, std::chrono::hours::max()));
      t.join();
    }
    {
      ev::UserEvent u;
      auto t = later(u);
      EXPECT_EQ(ev::wait_any({u}, std::chrono::hours::max()), std::optional<std::size_t>(0));
      t.join();
    }
    {
      ev::UserEvent u;
      ev::Stream s;
      s.wait(u);
      ev::Tensor x;
      {
        ev::StreamGuard g(s);
        x = ev::ones({2});
      }
      auto t = later(u);
      EXPECT_TRUE(x.wait_for(std::chrono::seconds::max()));
      t.join();
    }
    // The other end: huge negative timeouts are no time at all.
    ev::UserEvent pending;
    EXPECT_FALSE(pending.wait_for(std::chrono::hours::min()));
    EXPECT_FALSE(pending.wait_for(duration<double>(-1e300)));
    pending.set();
  });
}

}  // namespace

namespace {

// Regression (issue 10): wait_any over many copies of one pending event registered with it
// once per copy and took seconds to time out (100,000 copies, 0.5 s: 4.1 s).
TEST(WaitTest, WaitAnyOverManyCopiesOfOneEventTimesOutOnTime) {
  run_with_deadline([] {
    ev::UserEvent u;
    std::vector<ev::Event> copies(100'000, u);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ev::wait_any(copies, 100ms), std::nullopt);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(took, 2s) << "timing out took "
                        << std::chrono::duration<double>(took).count() << " s";
    // Mixed: the lowest index of a finished event, also when it repeats.
    ev::Event done;
    done.record(ev::ones({1}));
    done.wait();
    std::vector<ev::Event> mixed{u, u, done, u, done};
    EXPECT_EQ(ev::wait_any(mixed, 0ms), std::optional<std::size_t>(2));
    u.set();
    EXPECT_EQ(ev::wait_any(copies, 0ms), std::optional<std::size_t>(0));
  });
}

}  // namespace

namespace {

// Issue 28: every wait has a deadline form beside its timeout form, as abseil's do.
TEST(WaitTest, EveryWaitHasADeadlineFormThatReturnsFalseOnceItHasPassed) {
  run_with_deadline([] {
    ev::Stream s;
    ev::UserEvent gate;
    s.wait(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::ones({4});
    }
    ev::Event e;
    e.record(t);
    ev::SyncPoint point(s);
    const auto soon = Clock::now() + 20ms;
    const auto start = Clock::now();
    EXPECT_FALSE(e.wait_until(soon));
    EXPECT_FALSE(t.wait_until(soon));
    EXPECT_FALSE(ev::wait_all_until({e}, soon));
    EXPECT_EQ(ev::wait_any_until({e}, soon), std::nullopt);
    EXPECT_FALSE(s.synchronize_until(soon));
    EXPECT_FALSE(point.wait_until(soon));
    EXPECT_GE(Clock::now() - start, 20ms);
    EXPECT_LT(Clock::now() - start, 10s);  // each returned at the deadline, not later
    gate.set();
    const auto later = Clock::now() + 30s;
    EXPECT_TRUE(e.wait_until(later));
    EXPECT_TRUE(t.wait_until(later));
    EXPECT_TRUE(ev::wait_all_until({e}, later));
    EXPECT_EQ(ev::wait_any_until({e}, later), std::optional<std::size_t>(0));
    EXPECT_TRUE(s.synchronize_until(later));
    EXPECT_TRUE(point.wait_until(later));
    EXPECT_TRUE(e.wait_until(Clock::now() - 1s));  // a past deadline: finished work still says so
  });
}

}  // namespace
