// Event: the state machine (empty / pending / finished / failed), record of tensors and
// streams, accumulation, poll / wait / wait_for, reset, device, timing, error() and str().
// One component's tests in one binary (docs/DESIGN.md: one file per component); over 600 lines
// because the state machine's every transition has its own test.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/event_state.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// --- The state machine -------------------------------------------------------------------

TEST(EventTest, NewEventIsEmptyAndNotCompleted) {
  ev::Event e;
  EXPECT_EQ(e.status(), ev::EventStatus::empty);
  EXPECT_FALSE(e.poll());
  EXPECT_FALSE(e.completed());
  EXPECT_FALSE(e.query());
  EXPECT_EQ(e.device(), std::nullopt);
  EXPECT_EQ(e.error(), nullptr);
  EXPECT_TRUE(e.timing_enabled());
  EXPECT_FALSE(ev::Event(std::nullopt, ev::EventOptions{.enable_timing = false}).timing_enabled());
}

TEST(EventTest, WaitOnEmptyEventIsAStateError) {
  run_with_deadline([] {
    ev::Event e;
    EXPECT_THROW_MSG(e.wait(), ev::StateError, "empty");
    EXPECT_THROW_MSG((void)e.wait_for(10ms), ev::StateError, "empty");
    EXPECT_THROW(e.synchronize(), ev::StateError);
    // Nothing changed: the event is still empty and usable.
    EXPECT_EQ(e.status(), ev::EventStatus::empty);
    e.record(ev::ones({2}));
    e.wait();
    EXPECT_TRUE(e.poll());
  });
}

TEST(EventTest, RecordOfAFinishedTensorFinishesAtOnce) {
  run_with_deadline([] {
    ev::Tensor t = ev::ones({3});
    t.wait();
    ev::Event e;
    e.record(t);
    EXPECT_TRUE(e.poll());
    EXPECT_TRUE(e.completed());
    EXPECT_EQ(e.status(), ev::EventStatus::finished);
    EXPECT_EQ(e.device(), ev::Device::cpu());
    e.wait();
    EXPECT_TRUE(e.wait_for(0ns));
  });
}

TEST(EventTest, RecordOfAPendingTensorIsPendingUntilItsProducerFinishes) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::full({5}, 3.0);
    }
    ev::Event e;
    e.record(t);
    EXPECT_EQ(e.status(), ev::EventStatus::pending);
    EXPECT_FALSE(e.poll());
    EXPECT_FALSE(e.completed());
    EXPECT_FALSE(e.wait_for(5ms));
    EXPECT_EQ(e.error(), nullptr);
    gate.set();
    e.wait();
    EXPECT_EQ(e.status(), ev::EventStatus::finished);
    EXPECT_TRUE(t.ready());
    // What the op wrote is visible after wait().
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, 3.0f));
  });
}

TEST(EventTest, RecordOfAStreamTiesAllWorkEnqueuedSoFarAndNothingLater) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::atomic<int> ran{0};
    for (int i = 0; i < 3; ++i) s.enqueue("count", [&] { ran.fetch_add(1); });
    ev::Event e;
    e.record(s);
    EXPECT_FALSE(e.poll());
    // Work enqueued after the record (held back by a second gate) is not tied to e.
    ev::UserEvent later;
    s.wait(later);
    s.enqueue("later", [&] { ran.fetch_add(100); });
    gate.set();
    e.wait();
    EXPECT_EQ(ran.load(), 3);  // all three ran before e finished; the later one has not
    EXPECT_FALSE(s.query());
    later.set();
    s.synchronize();
    EXPECT_EQ(ran.load(), 103);
  });
}

TEST(EventTest, RecordWithoutArgumentTiesTheCurrentStream) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    s.enqueue("held", [] {});
    ev::Event e;
    {
      ev::StreamGuard g(s);
      e.record();  // s, not the (idle) default stream
    }
    EXPECT_FALSE(e.poll());
    gate.set();
    e.wait();
    // Outside the guard, record() uses the default stream.
    ev::Event d;
    ev::Tensor t = ev::ones({4});  // on the default stream
    d.record();
    d.wait();
    EXPECT_TRUE(t.ready());
    EXPECT_EQ(d.device(), ev::Device::cpu());
  });
}

TEST(EventTest, RecordOfAnIdleStreamFinishesAtOnceWithZeroTime) {
  ev::Stream s;
  ev::Event e;
  e.record(s);
  EXPECT_TRUE(e.poll());
  EXPECT_EQ(e.status(), ev::EventStatus::finished);
  EXPECT_EQ(e.time_elapsed().count(), 0.0);
  EXPECT_EQ(e.device(), ev::Device::cpu());
}

TEST(EventTest, SeveralRecordsAccumulateAndFinishWhenAllTiedWorkHas) {
  run_with_deadline([] {
    ev::UserEvent g1, g2;
    ev::Stream s1 = gated_stream(g1), s2 = gated_stream(g2);
    ev::Tensor t1, t2;
    {
      ev::StreamGuard g(s1);
      t1 = ev::ones({2});
    }
    {
      ev::StreamGuard g(s2);
      t2 = ev::ones({2});
    }
    ev::Event e;
    e.record(t1);
    e.record(t2);
    g1.set();
    t1.wait();
    EXPECT_FALSE(e.poll()) << "finished although t2's producer has not run";
    EXPECT_FALSE(e.wait_for(5ms));
    g2.set();
    e.wait();
    EXPECT_TRUE(t2.ready());
  });
}

TEST(EventTest, RecordingOnAFinishedEventMakesItPendingAgain) {
  run_with_deadline([] {
    ev::Event e;
    e.record(ev::ones({2}));
    e.wait();
    ASSERT_TRUE(e.poll());
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::ones({2});
    }
    e.record(t);
    EXPECT_EQ(e.status(), ev::EventStatus::pending);
    EXPECT_FALSE(e.poll());
    gate.set();
    e.wait();
    EXPECT_TRUE(e.poll());
    EXPECT_EQ(e.str(), "<Event finished on cpu, 2 ops>");
  });
}

TEST(EventTest, WaitForReturnsFalseOnTimeoutAndTrueOnceFinished) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    auto t0 = Clock::now();
    EXPECT_FALSE(e.wait_for(30ms));
    EXPECT_GE(ms_since(t0), 29.0);  // it did wait (for about) the timeout
    EXPECT_FALSE(e.wait_for(0ns));
    EXPECT_FALSE(e.wait_for(std::chrono::nanoseconds(-5)));
    gate.set();
    EXPECT_TRUE(e.wait_for(std::chrono::seconds(30)));
    EXPECT_TRUE(e.wait_for(0ns));
    // A huge timeout does not overflow into "already expired".
    EXPECT_TRUE(e.wait_for(std::chrono::nanoseconds::max()));
    EXPECT_TRUE(e.wait_for(std::chrono::hours(24 * 365)));
  });
}

TEST(EventTest, WaitWakesUpWhenTheWorkFinishes) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event e = s.enqueue("sleep", [] { std::this_thread::sleep_for(20ms); });
    auto t0 = Clock::now();
    e.wait();
    EXPECT_TRUE(e.poll());
    EXPECT_LT(ms_since(t0), 5000.0);
    ev::Event f = s.enqueue("sleep", [] { std::this_thread::sleep_for(20ms); });
    EXPECT_TRUE(f.wait_for(30s));
  });
}

TEST(EventTest, WaitRethrowsTheErrorOfFailedWork) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event e = s.enqueue("boom", [] { throw UserError("boom"); });
    auto err = capture([&] { e.wait(); });
    ASSERT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    EXPECT_NE(what(err).find("boom"), std::string::npos) << what(err);
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    EXPECT_TRUE(e.poll()) << "a failed event is finished";
    EXPECT_TRUE(holds<ev::OpError>(e.error()));
    EXPECT_THROW((void)e.wait_for(1s), ev::OpError);
    EXPECT_THROW(e.synchronize(), ev::OpError);
    // The failure stays until reset.
    EXPECT_THROW(e.wait(), ev::OpError);
    e.reset();
    EXPECT_EQ(e.error(), nullptr);
    e.record(ev::ones({1}));
    EXPECT_NO_THROW(e.wait());
  });
}

TEST(EventTest, ErrorIsNullUnlessTiedWorkFailed) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e;
    EXPECT_EQ(e.error(), nullptr);
    ev::Event failing = s.enqueue("boom", [] { throw UserError("x"); });
    e.record(s);
    EXPECT_EQ(e.error(), nullptr) << "pending: no error yet";
    gate.set();
    EXPECT_THROW(e.wait(), ev::OpError);
    EXPECT_NE(e.error(), nullptr);
    EXPECT_TRUE(holds<UserError>(op_cause(e.error())));
    ev::Event ok;
    ok.record(ev::zeros({1}));
    ok.wait();
    EXPECT_EQ(ok.error(), nullptr);
  });
}

TEST(EventTest, OneFailedRecordFailsTheWholeEvent) {
  run_with_deadline([] {
    ev::Stream s1, s2;
    ev::Event bad = s1.enqueue("boom", [] { throw UserError("bad"); });
    ev::Tensor good = ev::ones({2});
    ev::Event e;
    e.record(good);
    e.record(s1);
    EXPECT_THROW(e.wait(), ev::OpError);
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
  });
}

// --- reset -------------------------------------------------------------------------------

// Regression: the state errors of reset, time_elapsed, elapsed_time and add_callback used to
// deadlock (their messages were built with str() while the event's own lock was held; fixed
// in 808f634 with str_locked()). The calls run under call_within, so that a recurrence fails
// these tests instead of hanging the binary.
TEST(EventTest, ResetWhilePendingIsAStateErrorAndChangesNothing) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    auto r = call_within(5s, [e]() mutable { e.reset(); });
    ASSERT_TRUE(r.has_value()) << "reset() of a pending event deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    EXPECT_NE(what(*r).find("pending"), std::string::npos) << what(*r);
    EXPECT_EQ(e.status(), ev::EventStatus::pending);
    gate.set();
    e.wait();
    EXPECT_TRUE(e.poll());
  });
}

TEST(EventTest, ResetGoesBackToEmpty) {
  run_with_deadline([] {
    ev::Event e;
    e.record(ev::ones({2}));
    e.wait();
    e.reset();
    EXPECT_EQ(e.status(), ev::EventStatus::empty);
    EXPECT_FALSE(e.poll());
    EXPECT_EQ(e.device(), std::nullopt);
    EXPECT_THROW(e.wait(), ev::StateError);
    EXPECT_EQ(e.str(), "<Event empty, 0 ops>");
    // Reset of an empty event is fine, and the event can be recorded again.
    e.reset();
    e.record(ev::ones({2}));
    e.wait();
    EXPECT_TRUE(e.poll());
  });
}

TEST(EventTest, ResetRestoresTheDeviceGivenAtConstruction) {
  run_with_deadline([] {
    ev::Event bound(ev::Device::cpu());
    EXPECT_EQ(bound.device(), ev::Device::cpu()) << "given at construction: known before record";
    bound.record(ev::ones({1}));
    bound.wait();
    bound.reset();
    EXPECT_EQ(bound.device(), ev::Device::cpu());

    ev::Event unbound;
    EXPECT_EQ(unbound.device(), std::nullopt);
    unbound.record(ev::ones({1}));
    EXPECT_EQ(unbound.device(), ev::Device::cpu());
    unbound.wait();
    unbound.reset();
    EXPECT_EQ(unbound.device(), std::nullopt);
  });
}

// --- device ------------------------------------------------------------------------------

TEST(EventTest, ConstructingOnAnUnavailableDeviceIsInvalidArgument) {
  if (ev::is_available(ev::Device::cuda(0))) GTEST_SKIP() << "cuda:0 is available here";
  EXPECT_THROW_MSG(ev::Event(ev::Device::cuda(0)), ev::InvalidArgument, "cuda:0",
                   "not available");
  EXPECT_THROW_MSG(ev::Event(ev::Device("cuda:0"), ev::EventOptions{}), ev::InvalidArgument,
                   "cuda:0");
}

TEST(EventTest, RecordingWorkOfAnotherDeviceIsInvalidArgument) {
  run_with_deadline([] {
    if (ev::is_available(ev::Device::cuda(0))) {
      ev::Event e(ev::Device::cuda(0));
      EXPECT_THROW_MSG(e.record(ev::ones({1}, ev::DType::f32, ev::Device::cpu())),
                       ev::InvalidArgument, "cpu", "cuda:0");
      EXPECT_EQ(e.status(), ev::EventStatus::empty);
      return;
    }
    // No GPU here: check the device rule white-box, on an EventState bound to cuda:0.
    namespace d = ev::detail;
    auto state = std::make_shared<d::EventState>(ev::Device::cuda(0), ev::EventOptions{});
    auto timeline = d::make_ref<d::Timeline>("test timeline");
    auto work = d::make_ref<d::Work>(timeline, "op", d::WorkKind::op);
    work->set_seq(1);
    timeline->advance(1);
    EXPECT_THROW_MSG(state->record(work, ev::Device::cpu()), ev::InvalidArgument, "cpu",
                     "cuda:0");
    EXPECT_EQ(state->status(), ev::EventStatus::empty) << "nothing half-done";
    EXPECT_THROW(state->record_nothing(ev::Device::cpu()), ev::InvalidArgument);
    // Work of the bound device is accepted.
    state->record(work, ev::Device::cuda(0));
    EXPECT_TRUE(state->poll());
  });
}

// --- timing ------------------------------------------------------------------------------

TEST(EventTest, TimeElapsedIsMicrosecondsOfTheOpItself) {
  run_with_deadline([] {
    ev::Stream s;
    // A long op first: the measured op waits for it, and that wait must not count.
    s.enqueue("before", [] { std::this_thread::sleep_for(300ms); });
    ev::Event e = s.enqueue("sleep20", [] { std::this_thread::sleep_for(20ms); });
    e.wait();
    const double us = e.time_elapsed().count();
    EXPECT_GE(us, 20'000.0);
    EXPECT_LT(us, 250'000.0) << "includes the time the op queued behind the 300 ms one";
  });
}

TEST(EventTest, TimeElapsedIsPositiveForRealWork) {
  run_with_deadline([] {
    ev::Tensor a = ev::rand({128, 128}), b = ev::rand({128, 128});
    ev::Tensor c = ev::matmul(a, b);
    ev::Event e;
    e.record(c);
    e.wait();
    EXPECT_GT(e.time_elapsed().count(), 0.0);
  });
}

TEST(EventTest, TimeElapsedSpansStartOfTheFirstOpToEndOfTheLast) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor first = ev::empty({1}), last = ev::empty({1});
    s.enqueue("first", [] { std::this_thread::sleep_for(20ms); }, {}, {first});
    s.enqueue("gap", [] { std::this_thread::sleep_for(30ms); });  // not recorded, but between
    s.enqueue("last", [] { std::this_thread::sleep_for(20ms); }, {}, {last});
    ev::Event span;
    span.record(first);
    span.record(last);
    EXPECT_EQ(span.str(), "<Event pending on cpu, 2 ops>");
    gate.set();
    span.wait();
    const double us = span.time_elapsed().count();
    EXPECT_GE(us, 70'000.0) << "does not span first start .. last end";
    EXPECT_LT(us, 5'000'000.0);
  });
}

TEST(EventTest, RecordOfAStreamAfterAWaitIsAMarkerAtThatPoint) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event start = s.record_event();
    s.enqueue("sleep20", [] { std::this_thread::sleep_for(20ms); });
    ev::Event other;
    other.record(ev::ones({1}));
    other.wait();
    s.wait(other);  // finished already: nothing to wait for
    ev::Event e;
    e.record(s);
    e.wait();
    EXPECT_EQ(e.time_elapsed().count(), 0.0) << "a marker is a point: no duration of its own";
    EXPECT_GE(start.elapsed_time(e).count(), 20.0) << "the marker is after the 20 ms op";
  });
}

TEST(EventTest, TimeElapsedOfAnUnfinishedEventIsAStateError) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    auto r = call_within(5s, [e] { (void)e.time_elapsed(); });
    ASSERT_TRUE(r.has_value()) << "time_elapsed() of a pending event deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    EXPECT_NE(what(*r).find("not finished"), std::string::npos) << what(*r);
    ev::Event empty;
    r = call_within(5s, [empty] { (void)empty.time_elapsed(); });
    ASSERT_TRUE(r.has_value()) << "time_elapsed() of an empty event deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    gate.set();
    e.wait();
    EXPECT_GE(e.time_elapsed().count(), 0.0);
  });
}

TEST(EventTest, TimeElapsedWithTimingDisabledIsAStateError) {
  run_with_deadline([] {
    ev::Event e(std::nullopt, ev::EventOptions{.enable_timing = false});
    e.record(ev::ones({4}));
    e.wait();
    auto r = call_within(5s, [e] { (void)e.time_elapsed(); });
    ASSERT_TRUE(r.has_value()) << "time_elapsed() with timing disabled deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    EXPECT_NE(what(*r).find("timing"), std::string::npos) << what(*r);
    ev::Event end(std::nullopt, ev::EventOptions{.enable_timing = false});
    end.record(ev::ones({4}));
    end.wait();
    r = call_within(5s, [e, end] { (void)e.elapsed_time(end); });
    ASSERT_TRUE(r.has_value()) << "elapsed_time() with timing disabled deadlocked";
    EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
  });
}

TEST(EventTest, TimingCanBeDisabled) {
  ev::Stream s;
  EXPECT_FALSE(s.record_event(ev::EventOptions{.enable_timing = false}).timing_enabled());
  EXPECT_TRUE(s.record_event().timing_enabled());
  EXPECT_FALSE(ev::Event(std::nullopt, ev::EventOptions{.enable_timing = false}).timing_enabled());
}

TEST(EventTest, TimeElapsedOfAFailedEventRethrowsItsError) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event e = s.enqueue("boom", [] { throw UserError("timing of a failure"); });
    EXPECT_THROW(e.wait(), ev::OpError);
    auto err = capture([&] { (void)e.time_elapsed(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
  });
}

TEST(EventTest, ElapsedTimeIsMillisecondsBetweenCompletions) {
  run_with_deadline([] {
    ev::Stream s;
    s.enqueue("a", [] {});
    ev::Event start = s.record_event();
    s.enqueue("sleep30", [] { std::this_thread::sleep_for(30ms); });
    ev::Event end = s.record_event();
    end.wait();
    start.wait();
    const double ms = start.elapsed_time(end).count();
    EXPECT_GE(ms, 29.9);
    EXPECT_LT(ms, 5000.0);
    EXPECT_DOUBLE_EQ(end.elapsed_time(start).count(), -ms) << "negative when end finished first";
    EXPECT_DOUBLE_EQ(start.elapsed_time(start).count(), 0.0);
  });
}

TEST(EventTest, ElapsedTimeOfAnUnfinishedEventIsAStateError) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event done;
    done.record(ev::ones({1}));
    done.wait();
    ev::Event pending = s.enqueue("held", [] {});
    for (auto [a, b] : {std::pair{done, pending}, std::pair{pending, done},
                        std::pair{done, ev::Event()}}) {
      auto r = call_within(5s, [a, b] { (void)a.elapsed_time(b); });
      ASSERT_TRUE(r.has_value()) << "elapsed_time() with an unfinished event deadlocked";
      EXPECT_TRUE(holds<ev::StateError>(*r)) << what(*r);
    }
    gate.set();
    pending.wait();
    EXPECT_GE(done.elapsed_time(pending).count(), 0.0);
  });
}

TEST(EventTest, StrNamesStatusDeviceAndOpCount) {
  run_with_deadline([] {
    ev::Event e;
    EXPECT_EQ(e.str(), "<Event empty, 0 ops>");
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    s.enqueue("a", [] {});
    e.record(s);
    EXPECT_EQ(e.str(), "<Event pending on cpu, 1 op>");
    s.enqueue("b", [] {});
    e.record(s);
    EXPECT_EQ(e.str(), "<Event pending on cpu, 2 ops>");
    gate.set();
    e.wait();
    EXPECT_EQ(e.str(), "<Event finished on cpu, 2 ops>");
    ev::Event f = s.enqueue("boom", [] { throw UserError("x"); });
    EXPECT_THROW(f.wait(), ev::OpError);
    EXPECT_EQ(f.str(), "<Event failed on cpu, 1 op>");
    EXPECT_EQ(ev::name(ev::EventStatus::empty), "empty");
    EXPECT_EQ(ev::name(ev::EventStatus::pending), "pending");
    EXPECT_EQ(ev::name(ev::EventStatus::finished), "finished");
    EXPECT_EQ(ev::name(ev::EventStatus::failed), "failed");
  });
}

TEST(EventTest, CopiesShareOneEvent) {
  run_with_deadline([] {
    ev::Event a;
    ev::Event b = a;
    EXPECT_TRUE(a == b);
    EXPECT_FALSE(a == ev::Event());
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    s.enqueue("held", [] {});
    a.record(s);
    EXPECT_EQ(b.status(), ev::EventStatus::pending);
    gate.set();
    b.wait();
    EXPECT_TRUE(a.poll());
    b.reset();
    EXPECT_EQ(a.status(), ev::EventStatus::empty);
  });
}

TEST(EventTest, WaitSeesEverythingTheTiedWorkWrote) {
  run_with_deadline([] {
    const int rounds = iterations(2000);
    ev::Stream s;
    for (int i = 0; i < rounds; ++i) {
      auto value = std::make_shared<int>(0);
      ev::Event e = s.enqueue("write", [value, i] { *value = i + 1; });
      if (i % 2 == 0) {
        e.wait();
      } else {
        while (!e.poll()) std::this_thread::yield();
      }
      ASSERT_EQ(*value, i + 1);
    }
  });
}

// Regression test; this used to fail: a waiter can miss the completion of an event that another thread records again right
// after it finished. When tied work finishes, EventState::refresh_locked moves the waiters'
// parkers out of notifiers_ and unparks them (src/core/event.cpp, refresh_locked: `actions.wake
// = std::move(notifiers_)`); if another thread records new work before the woken waiter
// re-polls, the waiter sees PENDING and parks again (EventState::wait_until's loop) without
// registering its parker again, so nobody wakes it when the new work finishes: wait() hangs
// forever, wait_for() returns only at its timeout. Fix: re-register (add_notifier) before
// parking again when the event is found pending after a wake-up.
TEST(EventTest, WaiterIsWokenWhenAnotherThreadRecordsAgainAfterCompletion) {
  run_with_deadline([] {
    for (int round = 0; round < 5; ++round) {
      ev::UserEvent g1, g2;
      ev::Stream s1 = gated_stream(g1), s2 = gated_stream(g2);
      ev::Event first = s1.enqueue("first", [] {});
      ev::Event second = s2.enqueue("second", [] {});
      ev::Event e;
      e.record(s1);
      std::atomic<double> waited_ms{-1};
      std::thread waiter([&] {
        auto t0 = Clock::now();
        EXPECT_TRUE(e.wait_for(3s));
        waited_ms = ms_since(t0);
      });
      std::this_thread::sleep_for(30ms);  // let the waiter park
      g1.set();
      while (!e.poll()) {
      }
      e.record(s2);  // finished -> pending again, while the waiter is being woken
      std::this_thread::sleep_for(30ms);
      g2.set();
      e.wait();
      waiter.join();
      EXPECT_LT(waited_ms.load(), 1500.0)
          << "round " << round << ": the waiter slept until its timeout although the event "
          << "finished after ~60 ms";
    }
  });
}

}  // namespace

namespace {

TEST(EventTest, ABlockingEventWaitsAndFinishesLikeAnyOther) {
  run_with_deadline([] {
    ev::Event e(std::nullopt, {.enable_timing = true, .blocking = true, .interprocess = true});
    EXPECT_TRUE(e.options().blocking);
    EXPECT_TRUE(e.options().interprocess);
    EXPECT_FALSE(ev::Event().options().blocking);
    ev::UserEvent gate;
    ev::Stream s;
    s.wait(gate);
    e.record(s);
    std::thread setter([&] {
      std::this_thread::sleep_for(30ms);
      gate.set();
    });
    const auto start = Clock::now();
    e.wait();  // parks at once (no spin), woken by the gate's set
    EXPECT_GE(Clock::now() - start, 25ms);
    setter.join();
    EXPECT_TRUE(e.poll());
    EXPECT_TRUE(e.wait_for(0ms));
  });
}

TEST(EventTest, TheCpuHasNoNativeEventsAndSaysSo) {
  int not_an_event = 0;
  EXPECT_THROW_MSG(ev::Event::from_native(reinterpret_cast<CUevent_st*>(&not_an_event), ev::Device::cpu()),
                   ev::InvalidArgument, "cpu has no native events");
  ev::Event empty;
  EXPECT_THROW_MSG((void)empty.native_handle(), ev::StateError, "empty");
  ev::Event e;
  e.record(ev::ones({2}));
  EXPECT_THROW_MSG((void)e.native_handle(), ev::StateError, "no cudaEvent_t");
  e.wait();
}

TEST(EventTest, CpuStreamsHaveOnePriority) {
  EXPECT_EQ(ev::stream_priority_range(ev::Device::cpu()), (std::pair<int, int>{0, 0}));
  EXPECT_EQ(ev::Stream(ev::Device::cpu(), {.priority = -5}).priority(), 0);
}

}  // namespace
