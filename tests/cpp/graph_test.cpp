// Graphs (eventide/graph.hpp) on the CPU: what a capture records and runs (nothing), what a
// replay does each time (ordering, memory, events, failures), and what a capture refuses,
// abandoning itself without leaving anything hanging. The patterns follow what users of
// torch.cuda.graph and CUDA stream capture rely on: a static input updated with copy_
// between replays, outputs read after each replay, events recorded inside the capture timing
// the latest replay, and capture errors that leave the stream usable.
#include "graph_util.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace eventide_test {
namespace {

using ev::Capture;
using ev::Graph;
using ev::Tensor;

// x += one, `n` times, captured on a stream of its own.
Graph captured_adds(const Tensor& x, const Tensor& one, int n) {
  Capture capture;
  for (int i = 0; i < n; ++i) ev::add_out(x, x, one);
  return capture.end();
}

TEST(GraphTest, NothingRunsInTheCaptureAndEachReplayRunsTheWholeChain) {
  run_with_deadline([] {
    Tensor x = ev::zeros({8});
    Tensor one = ev::ones({8});
    Graph g = captured_adds(x, one, 100);
    EXPECT_EQ(g.ops(), 100u);
    EXPECT_EQ(values(x), std::vector<float>(8, 0.0f)) << "a capture runs nothing";
    ev::Event done = g.replay();
    done.wait();
    EXPECT_EQ(values(x), std::vector<float>(8, 100.0f));
    EXPECT_GE(done.time_elapsed().count(), 0.0);
    // Reading after replay() waits for that replay by itself.
    g.replay();
    EXPECT_EQ(values(x), std::vector<float>(8, 200.0f));
  });
}

TEST(GraphTest, TensorsMadeInTheCaptureAreTheGraphsAndHaveNoValueBeforeTheFirstReplay) {
  run_with_deadline([] {
    Tensor in = ev::full({4}, 2.0f);
    Tensor out;
    Graph g = captured([&] {
      Tensor doubled = ev::add(in, in);
      out = ev::mul(doubled, in);  // 2x * x
    });
    EXPECT_THROW_MSG((void)out.to_vector<float>(), ev::Error, "replay");
    g.replay();
    EXPECT_EQ(values(out), std::vector<float>(4, 8.0f));
    // The static-input pattern: new values copied into the input between replays.
    in.copy_(ev::full({4}, 3.0f));
    g.replay();
    EXPECT_EQ(values(out), std::vector<float>(4, 18.0f));
  });
}

TEST(GraphTest, EventsRecordedInTheCaptureAreRecordedAgainAtEachReplay) {
  run_with_deadline([] {
    Tensor x = ev::zeros({1 << 10});
    Tensor one = ev::ones({1 << 10});
    ev::Event start, middle, end;
    Graph g = captured([&] {
      start.record();
      for (int i = 0; i < 20; ++i) ev::add_out(x, x, one);
      middle.record();
      for (int i = 0; i < 20; ++i) ev::add_out(x, x, one);
      end.record();
    });
    for (int round = 1; round <= 3; ++round) {
      ev::Event done = g.replay();
      done.wait();
      EXPECT_TRUE(end.poll()) << "a replay's event covers the points after its last op";
      EXPECT_TRUE(start.poll());
      EXPECT_TRUE(middle.poll());
      const double first = start.elapsed_time(middle).count();
      const double second = middle.elapsed_time(end).count();
      EXPECT_GE(first, 0.0);
      EXPECT_GE(second, 0.0);
      EXPECT_NEAR(start.elapsed_time(end).count(), first + second, 1e-3);
      // Once per replay: the latest replay's points, not a span over all of them (the host
      // sleeps 300 ms between replays).
      EXPECT_LT(start.elapsed_time(end).count(), 250.0);
      EXPECT_LT(start.time_elapsed().count(), 1.0) << "one point: the latest replay's";
      EXPECT_EQ(values(x)[0], 40.0f * static_cast<float>(round));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
}

TEST(GraphTest, AReplaysEventTakesCallbacksAndWaitAllAndWaitAny) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    Graph g = captured_adds(x, one, 1);
    auto count = make_count();
    ev::Event a = g.replay();
    a.add_callback([count] { count->fetch_add(1); });
    ev::Event b = g.replay(ev::Stream());
    ev::wait_all({a, b});
    (void)ev::wait_any({a, b});
    EXPECT_TRUE(wait_for_count(*count, 1));
    EXPECT_EQ(values(x), std::vector<float>(4, 2.0f)) << "replays on two streams both ran, in order";
  });
}

TEST(GraphTest, AReplayOnAnotherStreamWaitsForTheReadersOfThePreviousReplaysOutput) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    Tensor out;
    Graph g = captured([&] {
      ev::add_out(x, x, one);
      out = ev::add(x, one);  // x + 1, the graph's own
    });
    g.replay();  // out = 2
    ev::Stream reader;
    std::atomic<float> seen{-1.0f};
    reader.enqueue(
        "slow_read",
        [out, &seen] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          seen = out.data<float>()[0];
        },
        {out}, {});
    ev::Stream other;
    g.replay(other).wait();  // would overwrite out under the reader, were it not ordered
    reader.synchronize();
    EXPECT_EQ(seen.load(), 2.0f);
    EXPECT_EQ(values(out), std::vector<float>(4, 3.0f));
  });
}

TEST(GraphTest, StreamsJoinedThroughEventsAreCapturedAndMustBeJoinedBack) {
  run_with_deadline([] {
    Tensor a = ev::zeros({4});
    Tensor b = ev::zeros({4});
    Tensor one = ev::ones({4});
    Graph g;
    ev::Stream side;
    {
      Capture capture;
      ev::Event fork = capture.stream().record_event();
      side.wait(fork);  // side joins the capture
      {
        ev::StreamGuard on(side);
        ev::add_out(b, b, one);
      }
      ev::add_out(a, a, one);
      capture.stream().wait(side.record_event());  // joined back
      g = capture.end();
    }
    EXPECT_EQ(g.ops(), 2u);
    EXPECT_EQ(values(b), std::vector<float>(4, 0.0f));
    g.replay().wait();
    EXPECT_EQ(values(a), std::vector<float>(4, 1.0f));
    EXPECT_EQ(values(b), std::vector<float>(4, 1.0f));
    // side runs eagerly again once the capture has ended.
    {
      ev::StreamGuard on(side);
      ev::add_out(b, b, one);
    }
    EXPECT_EQ(values(b), std::vector<float>(4, 2.0f));

    // Not joined back: the end says which stream and what to do.
    Capture capture;
    side.wait(capture.stream().record_event());
    {
      ev::StreamGuard on(side);
      ev::add_out(b, b, one);
    }
    const std::string side_name = side.str();  // (the macro reads its strings after the call)
    EXPECT_THROW_MSG((void)capture.end(), ev::StateError, "joined back", side_name.c_str());
    EXPECT_EQ(values(b), std::vector<float>(4, 2.0f)) << "an abandoned capture ran nothing";
  });
}

// Each refusal: a StateError naming the capture, the capture abandoned (later calls on its
// stream and end() throw it), nothing run, the stream usable once the capture is gone.
template <class Refused>
void expect_refused(Refused&& refused, const char* mention) {
  Tensor x = ev::zeros({4});
  Tensor one = ev::ones({4});
  ev::Stream s;
  {
    Capture capture(s);
    ev::add_out(x, x, one);
    EXPECT_THROW_MSG(refused(capture, x), ev::StateError, "the capture of graph", mention);
    EXPECT_THROW_MSG(ev::add_out(x, x, one), ev::StateError, "the capture of graph", mention);
    EXPECT_THROW_MSG((void)capture.end(), ev::StateError, "the capture of graph", mention);
  }
  EXPECT_EQ(values(x), std::vector<float>(4, 0.0f));
  {
    ev::StreamGuard on(s);
    ev::add_out(x, x, one);
  }
  s.synchronize();
  EXPECT_EQ(values(x), std::vector<float>(4, 1.0f));
}

TEST(GraphTest, AHostWaitOnCapturedWorkAbandonsTheCapture) {
  run_with_deadline([] {
    expect_refused([](Capture&, Tensor&) { (void)ev::add(ev::ones({4}), ev::ones({4})).to_vector<float>(); },
                   "host wait or a poll");
    expect_refused([](Capture&, Tensor&) {
      ev::Event e;
      e.record();
      e.wait();
    }, "host wait or a poll");
  });
}

TEST(GraphTest, SynchronizeAndQueryOfACapturingStreamAbandonTheCapture) {
  run_with_deadline([] {
    expect_refused([](Capture& c, Tensor&) { c.stream().synchronize(); }, "synchronize");
    expect_refused([](Capture&, Tensor&) { ev::synchronize(ev::Device::cpu()); }, "synchronize");
    expect_refused([](Capture& c, Tensor&) { (void)c.stream().query(); }, "query");
  });
}

TEST(GraphTest, APollOfCapturedWorkIsFalseAndAbandonsTheCaptureAtItsNextCall) {
  run_with_deadline([] {
    expect_refused([](Capture&, Tensor& x) {
      ev::Event e;
      e.record();
      EXPECT_FALSE(e.poll()) << "nothing captured has run";
      EXPECT_FALSE(ev::add(x, x).ready());
      ev::add_out(x, x, x);  // the next call of the capture is refused
    }, "poll");
  });
}

TEST(GraphTest, AUserEventGateAbandonsTheCapture) {
  run_with_deadline([] {
    ev::UserEvent gate;
    expect_refused([&](Capture& c, Tensor&) { c.stream().wait(gate); }, "UserEvent");
    gate.set();
  });
}

// Device work from outside the capture, still running when the capture's stream waits for it
// (an op issued before; wait_stream's marker): every replay comes after it.
TEST(GraphTest, AWaitForOutsideDeviceWorkStillRunningOrdersEveryReplayAfterIt) {
  run_with_deadline([] {
    ev::UserEvent held;
    ev::Stream busy = gated_stream(held);
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    Graph g = captured([&](Capture& capture) {
      capture.stream().wait_stream(busy);  // busy's marker waits behind the gate
      ev::add_out(x, x, one);
    });
    ev::Event done = g.replay(ev::Stream());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(done.poll()) << "the replay waits for busy's work";
    held.set();
    done.wait();
    EXPECT_EQ(values(x), std::vector<float>(4, 1.0f));
  });
}

TEST(GraphTest, ACaptureLeftWithoutEndRunsNothingAndFreesTheStream) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    ev::Stream s;
    Tensor made;
    {
      Capture capture(s);
      ev::add_out(x, x, one);
      made = ev::add(x, one);
    }
    EXPECT_THROW_MSG((void)made.to_vector<float>(), ev::StateError, "left without being ended");
    EXPECT_EQ(values(x), std::vector<float>(4, 0.0f));
    Capture again(s);  // the stream captures again
    ev::add_out(x, x, one);
    again.end().replay().wait();
    EXPECT_EQ(values(x), std::vector<float>(4, 1.0f));
  });
}

TEST(GraphTest, AnEagerOpOnATensorOfAnOpenCaptureFailsWhenItEndsAndNothingHangs) {
  run_with_deadline([] {
    Tensor out;
    ev::Stream eager;
    Tensor read;
    Graph g = captured([&] {
      out = ev::add(ev::ones({4}), ev::ones({4}));
      {
        ev::StreamGuard on(eager);
        read = ev::add(out, out);  // runs eagerly, after what produces out: the capture
      }
    });
    EXPECT_THROW_MSG((void)read.to_vector<float>(), ev::Error, "replay");
    g.replay();
    EXPECT_EQ(values(out), std::vector<float>(4, 2.0f));
  });
}

TEST(GraphTest, ANodeThatThrowsFailsThatReplayNamingIt) {
  run_with_deadline([] {
    auto calls = make_count();
    Tensor x = ev::zeros({4});
    Graph g = captured([&](Capture& capture) {
      capture.stream().enqueue("flaky", [calls] {
        if (calls->fetch_add(1) == 1) throw std::runtime_error("second call fails");
      }, {}, {x});
    });
    EXPECT_EQ(calls->load(), 0);
    g.replay().wait();
    ev::Event second = g.replay();
    EXPECT_THROW_MSG(second.wait(), ev::OpError, "flaky", "second call fails");
    EXPECT_EQ(calls->load(), 2);
  });
}

TEST(GraphTest, ABenchmarkOfAGraphCapturesOnceAndTimesReplays) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    int calls = 0;
    ev::BenchmarkResult r = ev::benchmark(
        [&] {
          ++calls;
          for (int i = 0; i < 10; ++i) ev::add_out(x, x, one);
        },
        {.n_repeat = 5, .n_warmup = 2, .device = ev::Device::cpu(), .name = "chain", .graph = true});
    EXPECT_EQ(calls, 1) << "captured once";
    EXPECT_EQ(r.device_times.size(), 5u);
    EXPECT_EQ(values(x), std::vector<float>(4, 70.0f)) << "7 replays of 10 adds";
    // A function that cannot be captured: the capture's error, no result.
    EXPECT_THROW_MSG((void)ev::benchmark([] { ev::ones({2}).wait(); }, {.graph = true}), ev::StateError,
                     "the capture of graph");
  });
}

TEST(GraphTest, AnEventRecordedInTheCaptureOnATensorFromOutsideFollowsTheReplayThatWritesIt) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    ev::Event e;
    Graph g = captured([&] {
      ev::add_out(x, x, one);
      e.record(x);  // x's producer is still the eager zeros: the record is the capture's
    });
    EXPECT_FALSE(e.poll() && !e.error()) << "it is no record of the zeros";
    ev::UserEvent gate;
    ev::Stream held = gated_stream(gate);
    g.replay(held);
    EXPECT_FALSE(e.poll()) << "the replay that writes x is held";
    gate.set();
    e.wait();
    EXPECT_EQ(values(x), std::vector<float>(4, 1.0f));
  });
}

TEST(GraphTest, AFailureInAStretchFailsTheLaterStretchesThatUseItsOutputs) {
  run_with_deadline([] {
    Tensor t = ev::zeros({4});
    Tensor out;
    ev::Event middle;
    Graph g = captured([&](Capture& capture) {
      capture.stream().enqueue("boom", [] { throw std::runtime_error("boom"); }, {}, {t});
      middle.record();
      out = ev::add(t, t);
    });
    ev::Event done = g.replay();
    EXPECT_THROW_MSG(done.wait(), ev::OpError, "boom");
    EXPECT_THROW_MSG((void)out.to_vector<float>(), ev::OpError, "boom");
  });
}

TEST(GraphTest, CopyIntoATensorIsCapturedOnOneDevice) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor src = ev::full({4}, 5.0f);
    Graph g = captured([&] {
      x.copy_(src);
    });
    EXPECT_EQ(values(x), std::vector<float>(4, 0.0f));
    g.replay();
    EXPECT_EQ(values(x), std::vector<float>(4, 5.0f));
  });
}

TEST(GraphTest, OtherThreadsSynchronizingOrPrintingDoNotAbandonTheCapture) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    ev::Event e;
    Capture capture;
    ev::add_out(x, x, one);
    e.record();
    std::thread([&] {
      ev::synchronize(ev::Device::cpu());
      capture.stream().synchronize();
      EXPECT_TRUE(capture.stream().query());
    }).join();
    EXPECT_NE(e.str().find("Event"), std::string::npos);
    ev::add_out(x, x, one);
    Graph g = capture.end();
    g.replay();
    EXPECT_EQ(values(x), std::vector<float>(4, 2.0f));
  });
}

TEST(GraphTest, AnEventOfTheCaptureIsNeverSeenEmptyByAWaiterWhileReplaysGoOn) {
  run_with_deadline([] {
    Tensor x = ev::zeros({4});
    Tensor one = ev::ones({4});
    ev::Event end;
    Graph g = captured([&] {
      ev::add_out(x, x, one);
      end.record();
    });
    g.replay().wait();
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::thread waiter([&] {
      while (!stop.load()) {
        try {
          end.wait();
        } catch (const ev::StateError&) {
          bad.fetch_add(1);
        }
      }
    });
    for (int i = 0; i < iterations(300); ++i) g.replay();
    end.wait();
    stop = true;
    waiter.join();
    EXPECT_EQ(bad.load(), 0);
  });
}

TEST(GraphTest, LaunchesRecordsAndJoinsRacingTheEndAreCapturedOrRefusedAndLeaveNoStreamCapturing) {
  run_with_deadline([] {
    Tensor one = ev::ones({4});
    for (int round = 0; round < iterations(200); ++round) {
      Tensor x = ev::zeros({4});
      ev::Stream side;
      Capture capture;
      ev::Stream s = capture.stream();
      ev::Event fork = s.record_event();
      std::atomic<bool> go{false};
      std::thread other([&] {
        while (!go.load()) std::this_thread::yield();
        try {
          s.enqueue("late", [] {}, {}, {x});
        } catch (const ev::StateError&) {
        }
        try {
          ev::Event late;
          late.record(s);  // a cut of the recording, racing the end's last one
        } catch (const ev::StateError&) {
        }
        try {
          side.wait(fork);
        } catch (const ev::StateError&) {
        }
      });
      go = true;
      try {
        (void)capture.end();
      } catch (const ev::StateError&) {
        // side joined before the end and was not joined back: refused, as it should be
      }
      other.join();
      // Neither stream is left capturing: an op is issued on each, not refused at the call
      // (side may be broken: a wait that came after the end waited on an event that has no
      // value until a replay).
      for (ev::Stream* st : {&side, &s}) {
        ev::StreamGuard on(*st);
        ASSERT_NO_THROW((void)ev::add(one, one)) << "round " << round;
      }
      ev::StreamGuard on(s);
      EXPECT_EQ(ev::add(one, one).to_vector<float>()[0], 2.0f);
    }
  });
}

TEST(GraphTest, TheProfilerDrawsAReplayAsOneBarWithItsNodesInside) {
  run_with_deadline([] {
    Tensor x = ev::zeros({1 << 16});
    Tensor one = ev::ones({1 << 16});
    Graph g = captured([&] {
      ev::add_out(x, x, one);
      Tensor y = ev::mul(x, one);
      ev::add_out(x, x, y);
    });
    ev::Profiler profiler;
    g.replay().wait();
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* replay = nullptr;
    for (const ev::ProfiledOp& op : p.ops()) {
      if (op.name.rfind("replay of graph", 0) == 0) replay = &op;
    }
    ASSERT_NE(replay, nullptr);
    ASSERT_EQ(replay->parts.size(), 3u) << "a part per node";
    EXPECT_EQ(replay->parts[0].name, "add");
    EXPECT_EQ(replay->parts[1].name, "mul");
    for (const ev::ProfiledPart& part : replay->parts) {
      EXPECT_GE(part.start_us, *replay->start_us - 1e-3);
      EXPECT_LE(part.end_us, *replay->end_us + 1e-3);
      EXPECT_LE(part.start_us, part.end_us);
    }
    EXPECT_NE(p.chrome_trace().find("graph nodes"), std::string::npos);
    EXPECT_NE(p.timeline_html().find("graph nodes"), std::string::npos);
  });
}

TEST(GraphTest, BadUseSaysWhatIsWrong) {
  run_with_deadline([] {
    EXPECT_THROW_MSG(Graph().replay(), ev::StateError, "no graph");
    ev::Stream s;
    Capture outer(s);
    EXPECT_THROW_MSG(Capture{s}, ev::StateError, "captured already");
    Graph g;
    {
      Capture other;
      g = other.end();
    }
    EXPECT_THROW_MSG(g.replay(s), ev::StateError, "replay");
    EXPECT_THROW_MSG((void)outer.end(), ev::StateError, "replay");
    g.replay().wait();  // an empty graph: its replay is a point in the stream
  });
}

}  // namespace
}  // namespace eventide_test
