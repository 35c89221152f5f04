// White-box tests of the runtime's primitives: Parker (src/core/parker.hpp) and Timeline
// (src/core/timeline.hpp, listeners taken back included), plus the Work error helpers
// (src/core/work.hpp), and kinds of event plugged into an EventState (src/core/event_kind.hpp).
// Over 600 lines: one binary for the runtime's white-box tests, one section per primitive.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <new>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/event_state.hpp"
#include "core/parker.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "core/runtime_lock.hpp"
#include "core/spin_lock.hpp"
#include "core/tensor_state.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;
namespace d = eventide::detail;
using Clock = std::chrono::steady_clock;

// --- Parker ------------------------------------------------------------------------------

TEST(ParkerTest, UnparkBeforeParkMakesParkReturnAtOnce) {
  run_with_deadline([] {
    auto p = d::make_ref<d::Parker>();
    p->unpark();
    auto t0 = Clock::now();
    p->park();  // no deadline: would hang if the token were lost
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  });
}

TEST(ParkerTest, SeveralUnparksMergeIntoOneToken) {
  run_with_deadline([] {
    auto p = d::make_ref<d::Parker>();
    p->unpark();
    p->unpark();
    p->unpark();
    p->park();  // consumes the merged token
    // The next park has no token: it returns at its deadline (or spuriously), not hanging.
    const auto deadline = Clock::now() + 20ms;
    while (Clock::now() < deadline) p->park(deadline);
    SUCCEED();
  });
}

TEST(ParkerTest, ParkWithADeadlineReturns) {
  run_with_deadline([] {
    auto p = d::make_ref<d::Parker>();
    auto t0 = Clock::now();
    const auto deadline = t0 + 30ms;
    while (Clock::now() < deadline) p->park(deadline);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    EXPECT_GE(ms, 30.0);
    EXPECT_LT(ms, 5000.0);
    // A deadline in the past returns at once.
    t0 = Clock::now();
    p->park(Clock::now() - 1s);
    p->park(Clock::time_point{});
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  });
}

TEST(ParkerTest, UnparkWakesAThreadParkedWithoutDeadline) {
  run_with_deadline([] {
    auto p = d::make_ref<d::Parker>();
    std::atomic<bool> go{false};
    std::thread sleeper([&] {
      while (!go.load(std::memory_order_acquire)) p->park();
    });
    std::this_thread::sleep_for(20ms);  // well past the spin: asleep on the futex
    go.store(true, std::memory_order_release);
    p->unpark();
    sleeper.join();
  });
}

TEST(ParkerTest, PingPongBetweenTwoParkersNeverLosesAWakeUp) {
  run_with_deadline([] {
    const int rounds = iterations(20'000);
    auto pa = d::make_ref<d::Parker>(), pb = d::make_ref<d::Parker>();
    std::atomic<int> turn{0};  // 0: a's turn, 1: b's turn
    long long data = 0;        // plain: ordered by unpark/park and `turn`
    std::thread b([&] {
      for (int i = 0; i < rounds; ++i) {
        while (turn.load(std::memory_order_acquire) != 1) pb->park();
        EXPECT_EQ(data, 2 * i + 1);
        ++data;
        turn.store(0, std::memory_order_release);
        pa->unpark();
      }
    });
    for (int i = 0; i < rounds; ++i) {
      while (turn.load(std::memory_order_acquire) != 0) pa->park();
      EXPECT_EQ(data, 2 * i);
      ++data;
      turn.store(1, std::memory_order_release);
      pb->unpark();
    }
    b.join();
    EXPECT_EQ(data, 2 * rounds);
  });
}

TEST(ParkerTest, ManyUnparkersOneParker) {
  for_thread_counts([](int threads) {
    auto p = d::make_ref<d::Parker>();
    const int per_thread = std::max(100, iterations(5'000) / threads);
    std::atomic<int> posted{0};
    std::thread consumer([&] {
      while (posted.load(std::memory_order_acquire) < threads * per_thread) p->park();
    });
    run_threads(threads, [&](int) {
      for (int i = 0; i < per_thread; ++i) {
        posted.fetch_add(1, std::memory_order_release);
        p->unpark();
      }
    });
    consumer.join();
  });
}

TEST(ParkerTest, EachThreadHasItsOwnParker) {
  const d::Parker* mine = d::this_thread_parker().get();
  EXPECT_EQ(d::this_thread_parker().get(), mine);
  const d::Parker* other = nullptr;
  std::thread([&] { other = d::this_thread_parker().get(); }).join();
  EXPECT_NE(other, mine);
}

TEST(ParkerTest, DeadlineHelpers) {
  EXPECT_EQ(d::deadline_after(std::nullopt), std::nullopt);
  EXPECT_EQ(d::deadline_after(std::chrono::nanoseconds::max()), std::nullopt) << "saturates";
  auto dl = d::deadline_after(1h);
  ASSERT_TRUE(dl.has_value());
  EXPECT_FALSE(d::expired(dl));
  EXPECT_FALSE(d::expired(std::nullopt));
  EXPECT_TRUE(d::expired(d::deadline_after(0ns)));
  EXPECT_TRUE(d::expired(d::deadline_after(-5s)));
}

// --- Timeline ----------------------------------------------------------------------------

// Counts its fire() calls and its destruction, and checks that it fires only once its
// target has passed.
class CountingListener final : public d::OneShotListener {
 public:
  CountingListener(const d::Timeline* timeline, std::uint64_t target, std::atomic<int>* fired,
                   std::atomic<int>* destroyed = nullptr, std::atomic<int>* early = nullptr,
                   std::thread::id* fired_on = nullptr)
      : timeline_(timeline),
        target_(target),
        fired_(fired),
        destroyed_(destroyed),
        early_(early),
        fired_on_(fired_on) {}
  ~CountingListener() override {
    if (destroyed_) destroyed_->fetch_add(1);
  }
  void run() noexcept override {
    if (early_ && timeline_->completed() < target_) early_->fetch_add(1);
    if (fired_on_) *fired_on_ = std::this_thread::get_id();
    fired_->fetch_add(1);
  }

 private:
  const d::Timeline* timeline_;
  std::uint64_t target_;
  std::atomic<int>* fired_;
  std::atomic<int>* destroyed_;
  std::atomic<int>* early_;
  std::thread::id* fired_on_;
};

TEST(TimelineTest, CountsUpAndNeverBackwards) {
  auto t = d::make_ref<d::Timeline>("test timeline");
  EXPECT_EQ(t->name(), "test timeline");
  EXPECT_EQ(t->completed(), 0u);
  EXPECT_TRUE(t->passed(0));
  EXPECT_FALSE(t->passed(1));
  t->advance(3);
  EXPECT_EQ(t->completed(), 3u);
  EXPECT_TRUE(t->passed(3));
  EXPECT_FALSE(t->passed(4));
  t->advance(2);  // not beyond: a no-op
  EXPECT_EQ(t->completed(), 3u);
}

TEST(TimelineTest, ListenersFireExactlyOnceWhenTheirFenceIsPassed) {
  auto t = d::make_ref<d::Timeline>("t");
  std::atomic<int> fired[6] = {}, destroyed{0}, early{0};
  for (std::uint64_t seq : {3u, 1u, 2u, 5u, 2u}) {
    t->listen(seq, std::make_unique<CountingListener>(t.get(), seq, &fired[seq], &destroyed, &early));
  }
  EXPECT_TRUE(t->has_listeners());
  EXPECT_EQ(fired[1] + fired[2] + fired[3] + fired[5], 0);
  t->advance(2);
  EXPECT_EQ(fired[1].load(), 1);
  EXPECT_EQ(fired[2].load(), 2);  // two listeners on fence 2
  EXPECT_EQ(fired[3].load(), 0);
  t->advance(2);
  EXPECT_EQ(fired[2].load(), 2) << "fired twice";
  t->advance(4);
  EXPECT_EQ(fired[3].load(), 1);
  EXPECT_EQ(fired[5].load(), 0);
  EXPECT_TRUE(t->has_listeners());
  t->advance(100);
  EXPECT_EQ(fired[5].load(), 1);
  EXPECT_FALSE(t->has_listeners());
  EXPECT_EQ(destroyed.load(), 5) << "listeners are destroyed right after firing";
  EXPECT_EQ(early.load(), 0);
  t->advance(200);
  EXPECT_EQ(fired[1] + fired[2] + fired[3] + fired[5], 5);
}

TEST(TimelineTest, ListenOnAPassedFenceFiresInlineOnTheCallingThread) {
  auto t = d::make_ref<d::Timeline>("t");
  t->advance(5);
  std::atomic<int> fired{0}, destroyed{0};
  std::thread::id fired_on;
  t->listen(3, std::make_unique<CountingListener>(t.get(), 3, &fired, &destroyed, nullptr, &fired_on));
  EXPECT_EQ(fired.load(), 1) << "not fired before listen() returned";
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(fired_on, std::this_thread::get_id());
  t->listen(5, std::make_unique<CountingListener>(t.get(), 5, &fired, &destroyed));
  EXPECT_EQ(fired.load(), 2);
  EXPECT_FALSE(t->has_listeners());
}

TEST(TimelineTest, NotifyFiresListenersPassedByAnOutsideCounter) {
  // notify() is how a backend whose counter is advanced elsewhere fires listeners; for an own
  // counter it must be harmless and fire nothing early.
  auto t = d::make_ref<d::Timeline>("t");
  std::atomic<int> fired{0}, early{0};
  t->listen(1, std::make_unique<CountingListener>(t.get(), 1, &fired, nullptr, &early));
  t->notify();
  EXPECT_EQ(fired.load(), 0);
  t->advance(1);
  t->notify();
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(early.load(), 0);
}

TEST(TimelineTest, UnfiredListenersAreFreedWithTheTimeline) {
  std::atomic<int> fired{0}, destroyed{0};
  {
    auto t = d::make_ref<d::Timeline>("t");
    t->listen(10, std::make_unique<CountingListener>(t.get(), 10, &fired, &destroyed));
    t->advance(5);
  }
  EXPECT_EQ(fired.load(), 0);
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(TimelineTest, UnlistenTakesBackAnUnfiredListenerAndDestroysIt) {
  auto t = d::make_ref<d::Timeline>("t");
  std::atomic<int> fired[3] = {}, destroyed{0};
  const std::uint64_t a = t->listen(5, std::make_unique<CountingListener>(t.get(), 5, &fired[0], &destroyed));
  const std::uint64_t b = t->listen(3, std::make_unique<CountingListener>(t.get(), 3, &fired[1], &destroyed));
  const std::uint64_t c = t->listen(7, std::make_unique<CountingListener>(t.get(), 7, &fired[2], &destroyed));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(t->unlisten(b));  // the one due first: the heap's front
  EXPECT_EQ(destroyed.load(), 1) << "not destroyed by unlisten()";
  EXPECT_FALSE(t->unlisten(b)) << "taken back twice";
  EXPECT_TRUE(t->unlisten(a));
  EXPECT_TRUE(t->has_listeners());
  t->advance(6);
  EXPECT_EQ(fired[0] + fired[1], 0) << "a listener taken back fired";
  EXPECT_EQ(fired[2].load(), 0);
  t->advance(7);
  EXPECT_EQ(fired[2].load(), 1) << "the listener left in place did not fire";
  EXPECT_FALSE(t->unlisten(c)) << "a fired listener was 'taken back'";
  EXPECT_FALSE(t->has_listeners());
  EXPECT_FALSE(t->unlisten(0));
  EXPECT_EQ(destroyed.load(), 3);
}

TEST(TimelineTest, ListenOnAPassedFenceReturnsIdZero) {
  auto t = d::make_ref<d::Timeline>("t");
  t->advance(4);
  std::atomic<int> fired{0};
  EXPECT_EQ(t->listen(2, std::make_unique<CountingListener>(t.get(), 2, &fired)), 0u);
  EXPECT_EQ(fired.load(), 1);
}

TEST(TimelineTest, ConcurrentUnlistenAndAdvanceEitherTakeBackOrFireEachListenerOnce) {
  // Each listener is taken back (unlisten true: never fires) or fires exactly once (false):
  // never both, never neither. Stale ids (of listeners that fired) take nothing back.
  for_thread_counts([](int threads) {
    const std::uint64_t last = static_cast<std::uint64_t>(std::max(200, iterations(20'000)));
    auto t = d::make_ref<d::Timeline>("t");
    const int per_thread = std::max(100, iterations(20'000) / threads);
    const int listeners = per_thread * threads;
    std::vector<std::atomic<int>> fired(static_cast<std::size_t>(listeners));
    std::vector<char> taken_back(static_cast<std::size_t>(listeners), 0);
    std::atomic<int> destroyed{0};
    run_threads(threads + 1, [&](int id) {
      if (id == threads) {
        for (std::uint64_t v = 1; v <= last; ++v) {
          t->advance(v);
          if (v % 64 == 0) std::this_thread::yield();
        }
        return;
      }
      std::mt19937 rng(static_cast<unsigned>(id) + 1u);
      for (int i = 0; i < per_thread; ++i) {
        const std::uint64_t seq = 1 + rng() % last;
        const std::size_t slot = static_cast<std::size_t>(id * per_thread + i);
        const std::uint64_t listen_id = t->listen(
            seq, std::make_unique<CountingListener>(t.get(), seq, &fired[slot], &destroyed));
        if (rng() % 2 == 0) taken_back[slot] = t->unlisten(listen_id) ? 1 : 0;
      }
    });
    t->advance(last);
    int wrong = 0;
    for (std::size_t i = 0; i < fired.size(); ++i) wrong += fired[i].load() + taken_back[i] != 1;
    EXPECT_EQ(wrong, 0) << "listeners both taken back and fired, or neither, or fired twice";
    EXPECT_EQ(destroyed.load(), listeners);
    EXPECT_FALSE(t->has_listeners());
  });
}

TEST(TimelineTest, ConcurrentListenAndAdvanceFireEachListenerExactlyOnce) {
  for_thread_counts([](int threads) {
    const std::uint64_t last = static_cast<std::uint64_t>(std::max(200, iterations(20'000)));
    auto t = d::make_ref<d::Timeline>("t");
    const int per_thread = std::max(100, iterations(20'000) / threads);
    const int listeners = per_thread * threads;
    std::vector<std::atomic<int>> fired(static_cast<std::size_t>(listeners));
    std::atomic<int> early{0};
    // One extra thread advances step by step (with a few jumps) while the others listen at
    // random fences, before, at and after the current value.
    run_threads(threads + 1, [&](int id) {
      if (id == threads) {
        std::mt19937 rng(7);
        std::uint64_t v = 0;
        while (v < last) {
          v = std::min(last, v + 1 + (rng() % 16 == 0 ? rng() % 50 : 0));
          t->advance(v);
          if (rng() % 64 == 0) std::this_thread::yield();
        }
        return;
      }
      std::mt19937 rng(static_cast<unsigned>(id) + 1u);
      for (int i = 0; i < per_thread; ++i) {
        const std::uint64_t seq = 1 + rng() % last;
        const std::size_t slot = static_cast<std::size_t>(id * per_thread + i);
        t->listen(seq, std::make_unique<CountingListener>(t.get(), seq, &fired[slot], nullptr, &early));
      }
    });
    t->advance(last);  // already there: fires nothing new
    int never = 0, twice = 0;
    for (auto& f : fired) {
      never += f.load() == 0;
      twice += f.load() > 1;
    }
    EXPECT_EQ(never, 0) << "listeners never fired (a missed wake-up)";
    EXPECT_EQ(twice, 0) << "listeners fired more than once";
    EXPECT_EQ(early.load(), 0) << "listeners fired before their fence passed";
    EXPECT_FALSE(t->has_listeners());
  });
}

TEST(TimelineTest, ConcurrentAdvancesFromManyThreadsKeepTheMaximum) {
  for_thread_counts([](int threads) {
    auto t = d::make_ref<d::Timeline>("t");
    const int per_thread = std::max(100, iterations(10'000) / threads);
    std::atomic<int> fired{0};
    const std::uint64_t top = static_cast<std::uint64_t>(per_thread) * static_cast<std::uint64_t>(threads);
    for (std::uint64_t s = 1; s <= top; s += 97) {
      t->listen(s, std::make_unique<CountingListener>(t.get(), s, &fired));
    }
    const int want = static_cast<int>((top - 1) / 97 + 1);
    run_threads(threads, [&](int id) {
      for (int i = 0; i < per_thread; ++i) {
        t->advance(static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(threads) +
                   static_cast<std::uint64_t>(id) + 1);
      }
    });
    EXPECT_EQ(t->completed(), top);
    EXPECT_EQ(fired.load(), want);
  });
}

// A listener its owner keeps (listen(seq, Listener&)): registered again from its own fire(),
// as an event re-arms itself on its next pending Work.
class KeptListener final : public d::Listener {
 public:
  d::Timeline* timeline = nullptr;
  std::uint64_t next = 0;  // registers itself again on this fence from fire(), if not 0
  int fired = 0;
  int dropped_count = 0;
  void fire() noexcept override {
    ++fired;
    if (next != 0) timeline->listen(std::exchange(next, 0), *this);
  }
  void dropped() noexcept override { ++dropped_count; }
};

TEST(TimelineTest, AListenerItsOwnerKeepsFiresOnceAndMayRegisterItselfAgainFromFire) {
  auto t = d::make_ref<d::Timeline>("t");
  KeptListener kept;
  kept.timeline = t.get();
  kept.next = 4;
  EXPECT_NE(t->listen(2, kept), 0u);
  t->advance(3);
  EXPECT_EQ(kept.fired, 1);
  EXPECT_TRUE(t->has_listeners()) << "not registered again from fire()";
  t->advance(4);
  EXPECT_EQ(kept.fired, 2);
  EXPECT_FALSE(t->has_listeners());
  EXPECT_EQ(kept.dropped_count, 0);
  EXPECT_EQ(t->listen(1, kept), 0u) << "a passed fence fires at once";
  EXPECT_EQ(kept.fired, 3);
}

TEST(TimelineTest, UnlistenDropsAListenerItsOwnerKeepsWithoutDestroyingIt) {
  auto t = d::make_ref<d::Timeline>("t");
  KeptListener kept;
  std::atomic<int> fired{0}, destroyed{0};
  const std::uint64_t id = t->listen(5, kept);
  t->listen(7, std::make_unique<CountingListener>(t.get(), 7, &fired, &destroyed));
  EXPECT_TRUE(t->unlisten(id));
  EXPECT_EQ(kept.dropped_count, 1);
  t->advance(10);
  EXPECT_EQ(kept.fired, 0);
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(destroyed.load(), 1);
  // Destroyed with a kept listener registered: dropped, not deleted (its owner keeps it).
  {
    auto u = d::make_ref<d::Timeline>("u");
    u->listen(3, kept);
  }
  EXPECT_EQ(kept.dropped_count, 2);
}

TEST(TimelineTest, ListenersOnManyFencesInAnyOrderFireInTargetOrder) {
  // The heap is linked through the listeners: a shuffled registration, fences passed one by
  // one, each listener fired when its own fence passes and not before.
  auto t = d::make_ref<d::Timeline>("t");
  constexpr int kCount = 2000;
  std::vector<std::uint64_t> targets;
  for (int i = 0; i < kCount; ++i) targets.push_back(static_cast<std::uint64_t>(1 + i % 500));
  std::shuffle(targets.begin(), targets.end(), std::mt19937(7));
  std::vector<std::atomic<int>> fired(501);
  std::atomic<int> early{0};
  for (std::uint64_t target : targets) {
    t->listen(target, std::make_unique<CountingListener>(t.get(), target, &fired[target], nullptr, &early));
  }
  for (std::uint64_t v = 1; v <= 500; ++v) {
    t->advance(v);
    ASSERT_EQ(fired[v].load(), kCount / 500) << "fence " << v;
    if (v < 500) ASSERT_EQ(fired[v + 1].load(), 0) << "fence " << v + 1 << " fired early";
  }
  EXPECT_EQ(early.load(), 0);
  EXPECT_FALSE(t->has_listeners());
}

TEST(TimelineTest, UnparkWhenPassedWakesTheParker) {
  auto t = d::make_ref<d::Timeline>("t");
  auto parker = d::make_ref<d::Parker>();
  ASSERT_TRUE(t->unpark_when_passed(1, parker));
  std::thread advancer([&] {
    std::this_thread::sleep_for(2ms);
    t->advance(1);
  });
  while (!t->passed(1)) parker->park(d::deadline_after(10s));
  advancer.join();
  EXPECT_TRUE(t->unpark_when_passed(1, parker)) << "a passed fence unparks at once";
  parker->park(d::deadline_after(10s));  // returns at once: the token is there
}

// --- Work errors -------------------------------------------------------------------------

TEST(WorkTest, DependencyErrorsNameBothOpsAndKeepTheRootCause) {
  auto tl = d::make_ref<d::Timeline>("cpu stream 42");
  auto producer = d::make_ref<d::Work>(tl, "producer", d::WorkKind::op);
  producer->set_seq(1);
  auto user_error = std::make_exception_ptr(UserError("root"));
  producer->set_error(std::make_exception_ptr(ev::OpError("producer failed", "producer#1", user_error)));
  tl->advance(1);
  auto consumer = d::make_ref<d::Work>(tl, "consumer", d::WorkKind::op);
  consumer->set_seq(2);
  EXPECT_EQ(consumer->describe(), "consumer#2 on cpu stream 42");
  consumer->deps().push_back(d::Dep{producer, d::DepKind::order});
  EXPECT_EQ(d::first_dependency_error(*consumer), nullptr) << "order deps do not propagate";
  consumer->deps().push_back(d::Dep{producer, d::DepKind::input});
  auto err = d::first_dependency_error(*consumer);
  ASSERT_TRUE(holds<ev::OpError>(err));
  const std::string msg = what(err);
  EXPECT_NE(msg.find("consumer#2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("producer#1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("root"), std::string::npos) << msg;
  EXPECT_TRUE(holds<UserError>(op_cause(err))) << "cause is the root, not the OpError wrapper";
  EXPECT_TRUE(holds<UserError>(d::root_cause(producer->error())));
  EXPECT_EQ(d::root_cause(user_error), user_error);
  EXPECT_EQ(d::describe_error(nullptr), "no error");
}

TEST(WorkTest, BodyAndShutdownErrorsNameTheWork) {
  auto tl = d::make_ref<d::Timeline>("cpu stream 7");
  auto work = d::make_ref<d::Work>(tl, "op", d::WorkKind::op);
  work->set_seq(3);
  auto thrown = std::make_exception_ptr(UserError("boom"));
  auto err = d::body_error(*work, thrown);
  ASSERT_TRUE(holds<ev::OpError>(err));
  EXPECT_NE(what(err).find("op#3 on cpu stream 7 failed: boom"), std::string::npos) << what(err);
  EXPECT_EQ(op_cause(err), thrown);
  auto stop = d::shutdown_error(*work);
  ASSERT_TRUE(holds<ev::StateError>(stop));
  EXPECT_NE(what(stop).find("op#3"), std::string::npos) << what(stop);
  EXPECT_STREQ(d::error_what(err), what(err).c_str());
  EXPECT_STREQ(d::error_what(nullptr), "no error");
  EXPECT_TRUE(holds<std::bad_alloc>(d::out_of_memory_error()));
}

}  // namespace

namespace {

// The rule of core/runtime_lock.hpp: a release handed to run_when_unlocked() runs at once on
// a thread that holds no runtime lock, and otherwise when that thread lets go of its last one.
TEST(RuntimeLockTest, ReleasesWaitForTheLastRuntimeLockToBeLetGo) {
  namespace d = ev::detail;
  static int runs = 0;
  static int locks_seen = -1;
  auto release = [](void*) {
    ++runs;
    locks_seen = d::runtime_locks_held();
  };
  runs = 0;
  d::run_when_unlocked(release, nullptr);
  EXPECT_EQ(runs, 1) << "no lock held: at once";
  d::RuntimeMutex outer, inner;
  d::SpinLock spin;
  const auto deferred = d::deferred_releases();
  {
    std::lock_guard a(outer);
    {
      std::lock_guard b(inner);
      std::lock_guard c(spin);
      EXPECT_EQ(d::runtime_locks_held(), 3);
      d::run_when_unlocked(release, nullptr);
      d::run_when_unlocked(release, nullptr);
    }
    EXPECT_EQ(runs, 1) << "ran while a runtime lock was still held";
  }
  EXPECT_EQ(runs, 3) << "did not run when the last runtime lock was let go";
  EXPECT_EQ(locks_seen, 0);
  EXPECT_EQ(d::deferred_releases(), deferred + 2);
  EXPECT_EQ(d::runtime_locks_held(), 0);
}

// A release that takes and lets go of a runtime lock (Python's cycle collector, run from a
// release, visits an event under its lock) does not run the other deferred releases from
// inside itself: they run after it, one at a time.
TEST(RuntimeLockTest, AReleaseThatLocksDoesNotRunTheOtherReleasesInsideItself) {
  namespace d = ev::detail;
  static d::RuntimeMutex visited;
  static int depth = 0, deepest = 0, runs = 0;
  auto release = [](void*) {
    ++depth;
    deepest = std::max(deepest, depth);
    { std::lock_guard lock(visited); }  // let go of its last lock inside a release
    ++runs;
    --depth;
  };
  depth = deepest = runs = 0;
  d::RuntimeMutex mu;
  {
    std::lock_guard lock(mu);
    for (int i = 0; i < 3; ++i) d::run_when_unlocked(release, nullptr);
  }
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(deepest, 1) << "a deferred release ran inside another one";
  EXPECT_EQ(d::runtime_locks_held(), 0);
}

}  // namespace

// --- Storage -------------------------------------------------------------------------------

TEST(StorageTest, AnAddressHandedOutOfEventideMarksItsStorage) {
  // A GPU backend reuses the memory of a storage at once when its last reference goes, unless
  // its address was handed out (to the user's kernels, to DLPack), where work eventide does not
  // see may still use it.
  ev::Tensor t = ev::zeros({4});
  ev::Tensor u = t + t;
  u.wait();
  EXPECT_FALSE(u.state()->storage->escaped()) << "an op's output, never handed out";
  (void)u.data_ptr();
  EXPECT_TRUE(u.state()->storage->escaped());
  (void)t.data<float>();  // through data<T>() too
  EXPECT_TRUE(t.state()->storage->escaped());
}

// --- Kinds of event (src/core/event_kind.hpp) --------------------------------------------
//
// A kind written here, as a new kind of event would be written in its own file: it plugs into
// EventState without EventState knowing of it.

namespace {

// Finishes host Work `w` of `timeline` (with `error`, or none) as a UserEvent's set() does.
void finish_host_work(d::Timeline& timeline, d::Work& w, std::exception_ptr error = nullptr) {
  const std::int64_t now = d::host_now_ns();
  w.set_times(now, now);
  w.set_error(std::move(error));
  timeline.advance(w.seq());
}

// Rounds on a host timeline (reset starts the next at once), one hidden work, and a count of
// the hooks' calls.
class TestKind final : public d::EventKind {
 public:
  std::string_view type_name() const noexcept override { return "TestEvent"; }
  bool shows_records() const noexcept override { return false; }
  void reset(d::EventState& event) override {
    ++resets;
    next = d::make_ref<d::Work>(timeline, "round", d::WorkKind::host);
    std::unique_lock lock(mu);
    event.restart("finish the round first", lock);
    EXPECT_FALSE(lock.owns_lock()) << "restart keeps the kind's lock while it wakes waiters";
  }
  d::Ref<d::Work> begin_round_locked() noexcept override {
    next->set_seq(++seq);
    round = std::move(next);
    return round;
  }
  void cleared() noexcept override { ++clears; }
  bool hidden_from_streams(const d::Work& w) const noexcept override { return &w == hidden.get(); }
  bool finished_only_by_handles() const noexcept override { return round && !round->done(); }

  d::RuntimeMutex mu;
  d::Ref<d::Timeline> timeline = d::make_ref<d::Timeline>("test kind");
  d::Ref<d::Work> next, round, hidden;
  std::uint64_t seq = 0;
  int resets = 0, clears = 0;
};

TEST(EventKindTest, AKindNamesTheEventAndItsResetStartsTheNextRound) {
  auto owned = std::make_unique<TestKind>();
  TestKind& kind = *owned;
  auto event = std::make_shared<d::EventState>(std::nullopt, ev::EventOptions{}, std::move(owned));
  EXPECT_EQ(event->kind(), &kind);
  EXPECT_EQ(event->status(), ev::EventStatus::empty);
  event->reset();  // the kind's reset: round 1, PENDING at once
  EXPECT_EQ(kind.resets, 1);
  EXPECT_EQ(kind.clears, 1);
  EXPECT_EQ(event->status(), ev::EventStatus::pending);
  EXPECT_EQ(event->str(), "<TestEvent pending>");
  // Pending: the kind's reset is refused with the kind's own advice, and nothing changes.
  try {
    event->reset();
    ADD_FAILURE() << "reset of a pending round did not throw";
  } catch (const ev::StateError& e) {
    EXPECT_NE(std::string(e.what()).find("finish the round first"), std::string::npos) << e.what();
  }
  EXPECT_EQ(event->status(), ev::EventStatus::pending);
  EXPECT_EQ(kind.round->seq(), 1u);
  finish_host_work(*kind.timeline, *kind.round);
  EXPECT_TRUE(event->poll());
  event->reset();  // round 2: pending again, on the round's work alone
  EXPECT_EQ(kind.round->seq(), 2u);
  EXPECT_EQ(event->status(), ev::EventStatus::pending);
  EXPECT_EQ(event->snapshot().pending.size(), 1u);
  finish_host_work(*kind.timeline, *kind.round, std::make_exception_ptr(ev::OpError("round 2 failed", "test")));
  EXPECT_EQ(event->status(), ev::EventStatus::failed);
}

TEST(EventKindTest, AStreamWaitLeavesOutWhatTheKindHidesButAnExportDoesNot) {
  auto owned = std::make_unique<TestKind>();
  TestKind& kind = *owned;
  auto event = std::make_shared<d::EventState>(std::nullopt, ev::EventOptions{}, std::move(owned));
  auto shown = d::make_ref<d::Work>(kind.timeline, "shown", d::WorkKind::host);
  shown->set_seq(1);
  kind.hidden = d::make_ref<d::Work>(kind.timeline, "hidden", d::WorkKind::host);
  kind.hidden->set_seq(2);
  event->record(shown, std::nullopt);
  event->record(kind.hidden, std::nullopt);
  auto for_stream = event->snapshot(d::EventState::SnapshotFor::stream_wait);
  ASSERT_EQ(for_stream.pending.size(), 1u);
  EXPECT_EQ(for_stream.pending[0], shown);
  EXPECT_EQ(event->snapshot(d::EventState::SnapshotFor::export_all).pending.size(), 2u);
  // Host waits wait for the hidden work too, and its error counts for streams once known.
  finish_host_work(*kind.timeline, *shown);
  EXPECT_FALSE(event->poll());
  finish_host_work(*kind.timeline, *kind.hidden, std::make_exception_ptr(ev::OpError("verdict", "test")));
  EXPECT_TRUE(event->poll());
  auto after = event->snapshot(d::EventState::SnapshotFor::stream_wait);
  EXPECT_TRUE(after.pending.empty());
  EXPECT_TRUE(after.error);
  EXPECT_EQ(event->str(), "<TestEvent failed>");  // shows_records() false: no op count
}

TEST(EventKindTest, APlainEventHasNoKindAndCountsItsOps) {
  auto event = std::make_shared<d::EventState>(std::nullopt, ev::EventOptions{});
  EXPECT_EQ(event->kind(), nullptr);
  auto timeline = d::make_ref<d::Timeline>("plain");
  auto w = d::make_ref<d::Work>(timeline, "w", d::WorkKind::host);
  w->set_seq(1);
  event->record(w, std::nullopt);
  EXPECT_EQ(event->str(), "<Event pending, 1 op>");
  finish_host_work(*timeline, *w);
  event->reset();  // the plain reset: EMPTY
  EXPECT_EQ(event->status(), ev::EventStatus::empty);
}

}  // namespace
