// UserEvent: events finished by host code: set / fail / reset rounds, waiters and callbacks,
// streams gated on them, and what happens when the last handle goes unset.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace eventide_test;
using Clock = std::chrono::steady_clock;

TEST(UserEventTest, StartsPending) {
  run_with_deadline([] {
    ev::UserEvent u;
    EXPECT_EQ(u.status(), ev::EventStatus::pending);
    EXPECT_FALSE(u.poll());
    EXPECT_FALSE(u.completed());
    EXPECT_EQ(u.error(), nullptr);
    EXPECT_EQ(u.device(), std::nullopt);
    EXPECT_FALSE(u.wait_for(5ms));
    EXPECT_EQ(u.str(), "<UserEvent pending>");
    ev::UserEvent on_cpu(ev::Device::cpu());
    EXPECT_EQ(on_cpu.device(), ev::Device::cpu());
  });
}

TEST(UserEventTest, OnAnUnavailableDeviceIsInvalidArgument) {
  if (ev::is_available(ev::Device::cuda(0))) GTEST_SKIP() << "cuda:0 is available here";
  EXPECT_THROW_MSG(ev::UserEvent(ev::Device::cuda(0)), ev::InvalidArgument, "cuda:0");
}

TEST(UserEventTest, SetFinishesItAndWakesEveryWaiter) {
  run_with_deadline([] {
    ev::UserEvent u;
    int payload = 0;  // written before set(), read by waiters after wait(): no data race
    std::atomic<int> woken{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i) {
      waiters.emplace_back([&] {
        u.wait();
        EXPECT_EQ(payload, 42);
        woken.fetch_add(1);
      });
    }
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(woken.load(), 0);
    payload = 42;
    u.set();
    for (auto& t : waiters) t.join();
    EXPECT_EQ(woken.load(), 4);
    EXPECT_EQ(u.status(), ev::EventStatus::finished);
    EXPECT_TRUE(u.poll());
    EXPECT_EQ(u.error(), nullptr);
    EXPECT_EQ(u.str(), "<UserEvent finished>");
  });
}

TEST(UserEventTest, SetIsIdempotent) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.set();
    EXPECT_NO_THROW(u.set());
    EXPECT_NO_THROW(u.set());
    u.wait();
    EXPECT_EQ(u.status(), ev::EventStatus::finished);
  });
}

TEST(UserEventTest, FailAfterSetIsAStateError) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.set();
    EXPECT_THROW_MSG(u.fail(std::make_exception_ptr(UserError("late"))), ev::StateError,
                     "set");
    EXPECT_EQ(u.status(), ev::EventStatus::finished) << "the failed call changed nothing";
    EXPECT_NO_THROW(u.wait());
  });
}

TEST(UserEventTest, SetAfterFailIsAStateError) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.fail(std::make_exception_ptr(UserError("first")));
    EXPECT_THROW_MSG(u.set(), ev::StateError, "failed");
    EXPECT_THROW(u.fail(std::make_exception_ptr(UserError("second"))), ev::StateError);
    EXPECT_EQ(u.status(), ev::EventStatus::failed);
    auto err = capture([&] { u.wait(); });
    EXPECT_EQ(what(err), "first");
  });
}

TEST(UserEventTest, FailWithNullIsInvalidArgumentAndChangesNothing) {
  run_with_deadline([] {
    ev::UserEvent u;
    EXPECT_THROW_MSG(u.fail(nullptr), ev::InvalidArgument, "null");
    EXPECT_EQ(u.status(), ev::EventStatus::pending);
    u.set();
    u.wait();
  });
}

TEST(UserEventTest, WaitersGetTheUsersOwnException) {
  run_with_deadline([] {
    ev::UserEvent u;
    std::exception_ptr seen;
    std::thread waiter([&] { seen = capture([&] { u.wait(); }); });
    std::this_thread::sleep_for(10ms);
    u.fail(std::make_exception_ptr(UserError("user failure")));
    waiter.join();
    EXPECT_TRUE(holds<UserError>(seen)) << what(seen);
    EXPECT_EQ(what(seen), "user failure");
    EXPECT_THROW(u.wait(), UserError);
    EXPECT_THROW((void)u.wait_for(1s), UserError);
    EXPECT_TRUE(holds<UserError>(u.error()));
    EXPECT_EQ(u.status(), ev::EventStatus::failed);
    EXPECT_TRUE(u.poll());
    // Through wait_all too.
    EXPECT_THROW(ev::wait_all({u}), UserError);
  });
}

TEST(UserEventTest, ResetAfterSetOrFailStartsANewPendingRound) {
  run_with_deadline([] {
    ev::UserEvent u(ev::Device::cpu());
    for (int round = 0; round < 50; ++round) {
      EXPECT_EQ(u.status(), ev::EventStatus::pending);
      EXPECT_FALSE(u.poll());
      std::exception_ptr seen;
      std::thread waiter([&] { seen = capture([&] { u.wait(); }); });
      if (round % 2 == 0) {
        u.set();
        waiter.join();
        EXPECT_EQ(seen, nullptr);
      } else {
        u.fail(std::make_exception_ptr(UserError("round " + std::to_string(round))));
        waiter.join();
        EXPECT_TRUE(holds<UserError>(seen));
        EXPECT_EQ(u.status(), ev::EventStatus::failed);
      }
      u.reset();
      EXPECT_EQ(u.error(), nullptr) << "reset clears the previous round's error";
      EXPECT_EQ(u.device(), ev::Device::cpu());
    }
    // After a reset, set and fail are allowed again.
    u.set();
    EXPECT_TRUE(u.poll());
  });
}

// Regression: this used to deadlock (see EventTest.ResetWhilePendingIsAStateErrorAndChanges
// Nothing).
TEST(UserEventTest, ResetWhilePendingIsAStateError) {
  run_with_deadline([] {
    ev::UserEvent u;
    auto r = call_within(5s, [u]() mutable { u.reset(); });
    ASSERT_TRUE(r.has_value()) << "UserEvent::reset() of a pending event deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    EXPECT_EQ(u.status(), ev::EventStatus::pending);
    u.set();
    u.wait();
  });
}

TEST(UserEventTest, CallbacksAddedWhileTheSameThreadSetsAndResetsAllRun) {
  run_with_deadline([] {
    // set(), poll() and reset() from the thread that owns the rounds, callbacks added from
    // others: every callback runs exactly once (the variant without the poll() is the bug in
    // CallbacksAddedWhileAnotherThreadSetsAndResetsAllRun).
    ev::UserEvent u;
    SharedCount calls = make_count();
    std::atomic<bool> stop{false};
    std::thread cycler([&] {
      while (!stop.load()) {
        u.set();
        (void)u.poll();
        u.reset();
      }
    });
    const int threads = 4, per_thread = iterations(5'000);
    run_threads(threads, [&](int) {
      for (int i = 0; i < per_thread; ++i) u.add_callback([calls] { calls->fetch_add(1); });
    });
    stop = true;
    cycler.join();
    u.set();
    EXPECT_TRUE(wait_for_count(*calls, threads * per_thread))
        << calls->load() << " of " << threads * per_thread;
  });
}

// Regression test; this used to fail: callbacks (and waiters) are lost when a UserEvent is set and reset by another thread
// while add_callback (or wait) is registering. EventState::reset's UserEvent branch
// (src/core/event.cpp: `Actions unused; refresh_locked(unused);  // a pending event has no
// actions to run: nothing is lost`) discards what refresh_locked collected. But add_callback
// and add_notifier set armed_ under mu_ and register the armed listener on the fence only
// after unlocking; if set() advances the fence in that gap (no listener yet, so the event stays
// PENDING with its work done) and reset() is the first to refresh it, the callbacks and the
// waiters' parkers of that round are moved into `unused` and dropped: those callbacks never
// run, and those waiters are never woken (wait() hangs). Repro: one thread loops
// `u.set(); u.reset();`, eight threads call u.add_callback(count++): about 2% of the callbacks
// never run. Fix: run(actions) after unlocking in the UserEvent branch too.
TEST(UserEventTest, CallbacksAddedWhileAnotherThreadSetsAndResetsAllRun) {
  run_with_deadline([] {
    // The window is narrow: try up to 5 rounds of 8 x 40,000 callbacks (the loss rate seen is
    // 0.001 % to 2 %), and fail at the first round that loses one.
    for (int round = 0; round < 5; ++round) {
      ev::UserEvent u;
      SharedCount calls = make_count();
      std::atomic<bool> stop{false};
      std::thread cycler([&] {
        while (!stop.load()) {
          u.set();
          u.reset();
        }
      });
      const int threads = 8, per_thread = 40'000;
      run_threads(threads, [&](int) {
        for (int i = 0; i < per_thread; ++i) u.add_callback([calls] { calls->fetch_add(1); });
      });
      stop = true;
      cycler.join();
      u.set();
      ASSERT_TRUE(wait_for_count(*calls, threads * per_thread, 5s))
          << "round " << round << ": " << threads * per_thread - calls->load() << " of "
          << threads * per_thread << " callbacks never ran";
    }
  });
}

TEST(UserEventTest, StreamGatedOnItRunsNoLaterWorkUntilSet) {
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Stream s;
    std::atomic<bool> ran{false};
    auto t0 = Clock::now();
    s.wait(u);  // the host does not block
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::full({3}, 7.0);
    }
    s.enqueue("flag", [&] { ran = true; });
    std::this_thread::sleep_for(30ms);
    EXPECT_FALSE(t.ready());
    EXPECT_FALSE(ran.load());
    EXPECT_FALSE(s.query());
    EXPECT_EQ(s.error(), nullptr);
    // Other streams are not held up.
    EXPECT_EQ(ev::ones({2}).to_vector<float>(), std::vector<float>(2, 1.0f));
    u.set();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 7.0f));
    s.synchronize();
    EXPECT_TRUE(ran.load());
    EXPECT_EQ(s.error(), nullptr);
  });
}

TEST(UserEventTest, StreamGatedOnItFailsWithTheUsersErrorAndStaysBroken) {
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Stream s;
    s.wait(u);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::ones({2});
    }
    std::atomic<bool> ran{false};
    ev::Event e = s.enqueue("gated", [&] { ran = true; });
    u.fail(std::make_exception_ptr(UserError("gate failed")));

    auto err = capture([&] { t.wait(); });
    ASSERT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    EXPECT_EQ(what(op_cause(err)), "gate failed");
    EXPECT_THROW(t.to_vector<float>(), ev::OpError);
    EXPECT_TRUE(holds<ev::OpError>(t.error()));
    err = capture([&] { e.wait(); });
    ASSERT_TRUE(holds<ev::OpError>(err));
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    EXPECT_FALSE(ran.load());

    s.synchronize();  // does not throw for failed ops
    ASSERT_NE(s.error(), nullptr) << "the stream is broken";
    EXPECT_TRUE(holds<UserError>(op_cause(s.error())) || holds<UserError>(s.error()))
        << what(s.error());

    // Work enqueued later on the broken stream fails too, with the same cause.
    ev::Event later = s.enqueue("later", [&] { ran = true; });
    err = capture([&] { later.wait(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    ev::Tensor later_t;
    {
      ev::StreamGuard g(s);
      later_t = ev::zeros({1});
    }
    EXPECT_THROW(later_t.wait(), ev::OpError);
    EXPECT_FALSE(ran.load());
    EXPECT_NE(s.error(), nullptr);
  });
}

TEST(UserEventTest, StreamWaitingOnAnAlreadyFailedUserEventIsBroken) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.fail(std::make_exception_ptr(UserError("already")));
    ev::Stream s;
    s.wait(u);
    ev::Event e = s.enqueue("after", [] {});
    auto err = capture([&] { e.wait(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    s.synchronize();
    EXPECT_NE(s.error(), nullptr);
  });
}

TEST(UserEventTest, DroppingTheLastHandleUnsetFailsTheEvent) {
  run_with_deadline([] {
    ev::Event plain;
    ev::Stream s;
    std::exception_ptr seen;
    std::thread waiter;
    {
      ev::UserEvent u;
      plain = u;
      s.wait(u);
      waiter = std::thread([plain, &seen] { seen = capture([&] { plain.wait(); }); });
      std::this_thread::sleep_for(20ms);  // the waiter is blocked
    }  // the last UserEvent handle goes, unset
    waiter.join();
    EXPECT_TRUE(holds<ev::StateError>(seen)) << what(seen);
    EXPECT_NE(what(seen).find("never"), std::string::npos) << what(seen);
    EXPECT_EQ(plain.status(), ev::EventStatus::failed);
    EXPECT_THROW(plain.wait(), ev::StateError);
    // The stream gated on it fails instead of hanging.
    ev::Event after = s.enqueue("after", [] {});
    auto err = capture([&] { after.wait(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<ev::StateError>(op_cause(err)));
  });
}

TEST(UserEventTest, DroppingAHandleThatWasSetChangesNothing) {
  run_with_deadline([] {
    ev::Event plain;
    {
      ev::UserEvent u;
      plain = u;
      u.set();
    }
    EXPECT_NO_THROW(plain.wait());
    EXPECT_EQ(plain.status(), ev::EventStatus::finished);
  });
}

TEST(UserEventTest, CopiesKeepItAliveUntilTheLastOneGoes) {
  run_with_deadline([] {
    ev::Event plain;
    ev::UserEvent keeper;
    {
      ev::UserEvent u;
      keeper = u;
      plain = u;
    }
    EXPECT_FALSE(plain.poll()) << "a UserEvent copy is still alive: not abandoned";
    EXPECT_FALSE(plain.wait_for(5ms));
    keeper.set();
    EXPECT_NO_THROW(plain.wait());
    // Moved-into handles work too.
    ev::UserEvent a;
    ev::UserEvent b = std::move(a);
    ev::Event pb = b;
    b.set();
    EXPECT_NO_THROW(pb.wait());
  });
}

TEST(UserEventTest, HandleCountCountsUserEventCopiesNotPlainEvents) {
  ev::UserEvent u;
  EXPECT_EQ(u.handle_count(), 1);
  {
    ev::UserEvent copy = u;
    ev::Event plain = u;
    EXPECT_EQ(u.handle_count(), 2);
    EXPECT_EQ(copy.handle_count(), 2);
  }
  EXPECT_EQ(u.handle_count(), 1);
}

TEST(UserEventTest, APlainEventCopyKeepsWorking) {
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Event e = u;
    EXPECT_TRUE(e == u);
    EXPECT_EQ(e.status(), ev::EventStatus::pending);
    EXPECT_FALSE(e.poll());
    Flag called;
    e.add_callback([&] { called.set(); });
    ev::Stream s;
    s.wait(e);
    ev::Event after = s.enqueue("after", [] {});
    EXPECT_FALSE(after.wait_for(10ms));
    u.set();
    e.wait();
    EXPECT_TRUE(e.poll());
    after.wait();
    EXPECT_TRUE(called.wait_for(30s));
    EXPECT_EQ(e.error(), nullptr);
    // wait_any / wait_all accept it.
    EXPECT_EQ(ev::wait_any({e}), std::optional<std::size_t>(0));
    EXPECT_NO_THROW(ev::wait_all({e, u}));
  });
}

TEST(UserEventTest, CallbacksRunWhenSetAndWhenFailed) {
  run_with_deadline([] {
    ev::UserEvent ok, bad;
    Flag ok_called, bad_called;
    std::exception_ptr bad_seen;
    ok.add_callback([&] { ok_called.set(); });
    bad.add_callback([&] {
      bad_seen = bad.error();
      bad_called.set();
    });
    EXPECT_FALSE(ok_called.is_set());
    ok.set();
    bad.fail(std::make_exception_ptr(UserError("cb")));
    EXPECT_TRUE(ok_called.wait_for(30s));
    EXPECT_TRUE(bad_called.wait_for(30s));
    EXPECT_TRUE(holds<UserError>(bad_seen));
  });
}

TEST(UserEventTest, ElapsedTimeBetweenUserEventsUsesTheHostClock) {
  run_with_deadline([] {
    ev::UserEvent a, b;
    a.set();
    std::this_thread::sleep_for(20ms);
    b.set();
    EXPECT_GE(a.elapsed_time(b).count(), 19.9);
    // CPU work shares the host clock, so the two can be compared.
    std::this_thread::sleep_for(5ms);
    ev::Event cpu;
    cpu.record(ev::ones({1}));
    cpu.wait();
    EXPECT_GT(b.elapsed_time(cpu).count(), 0.0);
  });
}

}  // namespace
