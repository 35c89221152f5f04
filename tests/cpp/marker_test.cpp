// Markers: record(stream) / record() / Stream::record_event() place a point at the current end
// of the stream, finished when the stream reaches it and timed at that instant. These are the
// timing idioms of PyTorch, CuPy and CUDA, on every state a stream can be in: new, busy,
// drained, broken, gated, used from several threads.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/event_state.hpp"
#include "core/stream_state.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;

double ms(std::chrono::duration<double, std::milli> d) { return d.count(); }

// Sleeps on the stream (an op of about `d`).
ev::Event sleep_op(ev::Stream& s, std::chrono::milliseconds d) {
  return s.enqueue("sleep", [d] { std::this_thread::sleep_for(d); });
}

// --- The timing idiom: start.record(); work; end.record(); end.synchronize(); elapsed ------

TEST(MarkerTest, TheTimingIdiomWorksOnANewStream) {
  run_with_deadline([] {
    ev::Stream s;  // never used: no work before the start marker
    ev::Event start, end;
    start.record(s);
    sleep_op(s, 20ms);
    end.record(s);
    end.synchronize();
    const double elapsed = ms(start.elapsed_time(end));
    EXPECT_GE(elapsed, 20.0);
    EXPECT_LT(elapsed, 2000.0);
  });
}

TEST(MarkerTest, TheTimingIdiomWorksOnTheCurrentStreamWithRecordOfNothing) {
  run_with_deadline([] {
    ev::Stream s;
    ev::StreamGuard guard(s);
    ev::Event start, end;
    start.record();  // the current stream, new
    ev::Tensor t = ev::ones({64});
    ev::Tensor u = t + t;
    end.record();
    end.wait();
    EXPECT_TRUE(u.ready()) << "the end marker follows the ops before it";
    const double elapsed = ms(start.elapsed_time(end));
    EXPECT_GT(elapsed, 0.0) << "real work lies between the two markers";
    EXPECT_EQ(start.device(), ev::Device::cpu());
  });
}

TEST(MarkerTest, ADrainedStreamDoesNotCountTheHostsIdleTime) {
  run_with_deadline([] {
    ev::Stream s;
    sleep_op(s, 5ms);
    s.synchronize();
    std::this_thread::sleep_for(300ms);  // the host idles; the stream has nothing to do
    ev::Event start, end;
    start.record(s);
    ev::Tensor a = ev::ones({16});
    s.enqueue("tiny", [] {}, {a});
    end.record(s);
    end.wait();
    const double elapsed = ms(start.elapsed_time(end));
    EXPECT_GE(elapsed, 0.0);
    EXPECT_LT(elapsed, 150.0) << "the 300 ms the host idled before the start marker was counted";
    EXPECT_EQ(start.time_elapsed().count(), 0.0) << "a single marker is a point";
  });
}

TEST(MarkerTest, ReusedEventsInALoopReadEachIterationNotTheHostsWorkBetween) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event start, end;
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(100ms);  // host work between iterations
      start.record(s);
      sleep_op(s, 2ms);
      end.record(s);
      end.synchronize();
      const double elapsed = ms(start.elapsed_time(end));
      EXPECT_GE(elapsed, 2.0) << "iteration " << i;
      EXPECT_LT(elapsed, 80.0) << "iteration " << i << " counted the host's 100 ms";
      start.reset();
      end.reset();
    }
  });
}

TEST(MarkerTest, RecordingAgainWithoutResetMovesTheEventToTheNewMarker) {
  run_with_deadline([] {
    // PyTorch re-records the same two events every iteration without reset: the completion
    // is the latest marker's.
    ev::Stream s;
    ev::Event start, end;
    std::vector<double> reads;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(50ms);
      start.record(s);
      sleep_op(s, 2ms);
      end.record(s);
      end.synchronize();
      reads.push_back(ms(start.elapsed_time(end)));
    }
    // The second and third start records made `start` pending again and then finished with
    // a later completion; each reading is one iteration's.
    for (double r : reads) {
      EXPECT_GE(r, 2.0);
      EXPECT_LT(r, 40.0);
    }
  });
}

// --- What a marker is --------------------------------------------------------------------

TEST(MarkerTest, AMarkerOnAnIdleStreamFinishesAtOnceAtTheTimeOfTheRecord) {
  ev::Stream s;
  ev::Event before_ops;
  before_ops.record(ev::ones({1}));  // an op elsewhere
  ev::Event e;
  e.record(s);
  EXPECT_TRUE(e.poll()) << "an idle stream is at its end already";
  EXPECT_EQ(e.status(), ev::EventStatus::finished);
  EXPECT_EQ(e.time_elapsed().count(), 0.0);
  EXPECT_EQ(e.str(), "<Event finished on cpu, 1 op>");
}

TEST(MarkerTest, AMarkerOnABusyStreamFinishesOnlyAfterTheWorkBeforeIt) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::atomic<bool> ran{false};
    ev::Tensor out = ev::empty({1});
    s.enqueue("work", [&] {
      std::this_thread::sleep_for(10ms);
      ran = true;
    }, {}, {out});
    ev::Event op, marker;
    op.record(out);
    marker.record(s);
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(marker.poll()) << "finished before the work it covers";
    gate.set();
    marker.wait();
    EXPECT_TRUE(ran.load());
    EXPECT_TRUE(op.poll());
    // The marker's time is when the stream reached it: after the op it follows ended.
    EXPECT_GE(op.elapsed_time(marker).count(), 0.0);
  });
}

TEST(MarkerTest, TwoMarkersOnOneEventSpanTheTimeBetweenThem) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event span;
    span.record(s);
    sleep_op(s, 20ms);
    span.record(s);
    EXPECT_EQ(span.str(), "<Event pending on cpu, 2 ops>");
    span.wait();
    const double us = span.time_elapsed().count();
    EXPECT_GE(us, 20'000.0) << "earliest marker .. latest marker";
    EXPECT_LT(us, 2'000'000.0);
  });
}

TEST(MarkerTest, AnOpAndAMarkerOnOneEventSpanTheOpsStartToTheMarker) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Tensor out = ev::empty({1});
    s.enqueue("op", [] { std::this_thread::sleep_for(10ms); }, {}, {out});
    sleep_op(s, 10ms);
    ev::Event e;
    e.record(out);
    e.record(s);
    e.wait();
    EXPECT_GE(e.time_elapsed().count(), 20'000.0) << "the op's start .. the marker after both ops";
  });
}

TEST(MarkerTest, ElapsedTimeIsPositiveForTheSmallestWorkBetweenTwoMarkers) {
  run_with_deadline([] {
    ev::Stream s;
    sleep_op(s, 5ms);  // busy: the start marker is queued behind it
    ev::Event start, end;
    start.record(s);
    s.enqueue("tiny", [] {
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < 5us) {
      }
    });
    end.record(s);
    end.wait();
    EXPECT_GT(ms(start.elapsed_time(end)), 0.0);
    EXPECT_LT(ms(end.elapsed_time(start)), 0.0) << "reversed: negative, as in PyTorch";
  });
}

TEST(MarkerTest, MarkersOfAStreamFinishInOrderWithNonDecreasingTimes) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::vector<ev::Event> marks;
    for (int i = 0; i < 20; ++i) {
      if (i % 3 == 0) s.enqueue("work", [] { std::this_thread::sleep_for(1ms); });
      marks.push_back(s.record_event());
    }
    gate.set();
    marks.back().wait();
    for (std::size_t i = 0; i < marks.size(); ++i) {
      EXPECT_TRUE(marks[i].poll()) << i << ": a later marker finished first";
      if (i > 0) EXPECT_GE(marks[i - 1].elapsed_time(marks[i]).count(), 0.0) << i;
    }
  });
}

TEST(MarkerTest, AMarkerAfterAFailedOpFailsWithItsCauseAndTheNextOneAfterSuccessDoesNot) {
  run_with_deadline([] {
    ev::Stream s;
    s.enqueue("boom", [] { throw UserError("x"); });
    ev::Event e;
    e.record(s);
    EXPECT_THROW(e.wait(), ev::OpError);
    EXPECT_TRUE(holds<UserError>(op_cause(e.error())));
    EXPECT_NE(what(e.error()).find("boom"), std::string::npos) << what(e.error());
    ev::Event again = s.record_event();  // the work right before it failed (a marker)
    EXPECT_THROW(again.wait(), ev::OpError);
    s.enqueue("fine", [] {});
    ev::Event after = s.record_event();
    EXPECT_NO_THROW(after.wait()) << "one failed op does not break the stream";
  });
}

TEST(MarkerTest, AMarkerOnABrokenStreamFails) {
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Stream s;
    s.wait(u);
    ev::Event e = s.record_event();
    EXPECT_FALSE(e.poll());
    u.fail(std::make_exception_ptr(UserError("gate failed")));
    EXPECT_THROW(e.wait(), ev::OpError);
    EXPECT_TRUE(holds<UserError>(op_cause(e.error())));
    s.enqueue("later", [] {});
    EXPECT_THROW(s.record_event().wait(), ev::OpError) << "the stream stays broken";
  });
}

TEST(MarkerTest, AMarkerHeldBehindAUserEventFinishesAfterTheSetAndCountsNoWaitBeforeIt) {
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Stream s;
    ev::Event before = s.record_event();  // idle: at once
    s.wait(u);
    ev::Event start = s.record_event();
    sleep_op(s, 5ms);
    ev::Event end = s.record_event();
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(before.poll());
    EXPECT_FALSE(start.poll()) << "the stream has not reached it: it waits for the UserEvent";
    u.set();
    end.wait();
    const double region = ms(start.elapsed_time(end));
    EXPECT_GE(region, 5.0);
    EXPECT_LT(region, 45.0) << "the 50 ms the stream waited before the start marker was counted";
    EXPECT_GE(ms(before.elapsed_time(start)), 50.0) << "the wait lies between `before` and `start`";
  });
}

TEST(MarkerTest, TimingDisabledMarkersFinishButHaveNoTimes) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event start(std::nullopt, ev::EventOptions{.enable_timing = false});
    ev::Event end(std::nullopt, ev::EventOptions{.enable_timing = false});
    start.record(s);
    sleep_op(s, 1ms);
    end.record(s);
    end.wait();
    EXPECT_THROW_MSG((void)start.elapsed_time(end), ev::StateError, "timing disabled");
    EXPECT_THROW_MSG((void)end.time_elapsed(), ev::StateError, "timing disabled");
  });
}

TEST(MarkerTest, RecordOfAnotherDevicesEventPlacesNoMarker) {
  run_with_deadline([] {
    // White-box (no GPU needed): an event bound to cuda:0 refuses a cpu stream's marker
    // before the marker is placed.
    namespace d = ev::detail;
    auto state = std::make_shared<d::EventState>(ev::Device::cuda(0), ev::EventOptions{});
    ev::Stream s;
    EXPECT_THROW_MSG(state->check_device(ev::Device::cpu(), *s.state()), ev::InvalidArgument,
                     "marker", "cuda:0");
    EXPECT_EQ(s.state()->sync_point(), 0u) << "nothing was enqueued";
  });
}

// --- Streams built on markers -------------------------------------------------------------

TEST(MarkerTest, WaitStreamOrdersAfterEverythingEnqueuedOnTheOther) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream producer = gated_stream(gate);
    ev::Stream consumer;
    std::atomic<int> step{0};
    producer.enqueue("first", [&] { step = 1; });
    consumer.wait_stream(producer);
    int seen = -1;
    consumer.enqueue("after", [&] { seen = step.load(); });
    ev::Event done = consumer.record_event();
    std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(done.poll());
    gate.set();
    done.wait();
    EXPECT_EQ(seen, 1);
    // An idle stream to wait for: nothing is enqueued on the waiting stream.
    ev::Stream idle, waiter;
    waiter.wait_stream(idle);
    EXPECT_EQ(waiter.state()->sync_point(), 0u);
  });
}

TEST(MarkerTest, SynchronizeAndQueryCoverEverythingEnqueued) {
  run_with_deadline([] {
    ev::Stream s;
    EXPECT_TRUE(s.query());
    sleep_op(s, 10ms);
    EXPECT_FALSE(s.query());
    s.synchronize();
    EXPECT_TRUE(s.query());
  });
}

TEST(MarkerTest, MarkersFromSeveralThreadsOnOneStreamAllFinish) {
  for_thread_counts([](int threads) {
    ev::Stream s;
    std::vector<std::vector<ev::Event>> marks(threads);
    run_threads(threads, [&](int t) {
      for (int i = 0; i < 50; ++i) {
        if (i % 5 == 0) s.enqueue("w", [] {});
        marks[t].push_back(s.record_event());
      }
    });
    for (auto& per_thread : marks) {
      for (std::size_t i = 1; i < per_thread.size(); ++i) {
        per_thread[i].wait();
        EXPECT_TRUE(per_thread[i - 1].poll()) << "a thread's markers finish in its order";
        EXPECT_GE(per_thread[i - 1].elapsed_time(per_thread[i]).count(), 0.0);
      }
    }
  });
}

}  // namespace
