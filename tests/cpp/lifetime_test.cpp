// Lifetime: dropping Event, Tensor and Stream handles never blocks and never breaks pending
// work; a tensor's memory lives until every op using it has finished (run under ASan to catch
// a use after free); callbacks outlive the handles of their event; the process exits cleanly
// with work still pending.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace eventide_test;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(LifetimeTest, DroppingAnEventHandleNeitherBlocksNorCancelsItsWork) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::atomic<bool> ran{false};
    auto t0 = Clock::now();
    {
      ev::Event e = s.enqueue("held", [&] { ran = true; });
      ev::Event copy = e;
    }  // every handle of the event is gone
    s.record_event();  // and a temporary one
    EXPECT_LT(seconds_since(t0), 1.0);
    gate.set();
    s.synchronize();
    EXPECT_TRUE(ran.load());
  });
}

TEST(LifetimeTest, InputsDroppedRightAfterEnqueueingAnOpStayAliveUntilItRan) {
  run_with_deadline([] {
    for (int round = 0; round < 20; ++round) {
      ev::UserEvent gate;
      ev::Stream s = gated_stream(gate);
      ev::Tensor c, d;
      {
        std::vector<float> av(64 * 32), bv(32 * 48);
        for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i % 7);
        for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 5) - 2.0f;
        ev::Tensor a = ev::from_host(av.data(), {64, 32});
        ev::Tensor b = ev::from_host(bv.data(), {32, 48});
        ev::Tensor ones = ev::ones({64, 48});
        ev::StreamGuard g(s);
        c = ev::matmul(a, b);  // held back: a and b are read later
        d = ev::add(c, ones);
      }  // a, b and ones: every handle dropped while the ops that read them wait
      // Fresh allocations that would reuse freed memory.
      std::vector<ev::Tensor> noise;
      for (int i = 0; i < 8; ++i) noise.push_back(ev::full({64, 32}, -1000.0));
      gate.set();
      auto cv = c.to_vector<float>();
      auto dv = d.to_vector<float>();
      for (int i = 0; i < 64; ++i) {
        for (int j = 0; j < 48; ++j) {
          float want = 0;
          for (int k = 0; k < 32; ++k) {
            want += static_cast<float>((i * 32 + k) % 7) * (static_cast<float>((k * 48 + j) % 5) - 2.0f);
          }
          ASSERT_EQ(cv[static_cast<std::size_t>(i * 48 + j)], want) << i << "," << j;
          ASSERT_EQ(dv[static_cast<std::size_t>(i * 48 + j)], want + 1.0f);
        }
      }
    }
  });
}

TEST(LifetimeTest, MemoryReadByASlowEnqueuedFunctionOutlivesItsHandles) {
  run_with_deadline([] {
    ev::Stream s;
    std::vector<float> seen;
    {
      ev::Tensor t = ev::full({1000}, 3.0);
      t.wait();
      const float* raw = t.data<float>();  // the function keeps no handle, only `reads`
      s.enqueue(
          "slow_read",
          [raw, &seen] {
            std::this_thread::sleep_for(30ms);
            seen.assign(raw, raw + 1000);
          },
          {t});
    }  // the last handle goes while the function sleeps
    for (int i = 0; i < 8; ++i) ev::full({1000}, -1.0).wait();  // would reuse the memory
    s.synchronize();
    EXPECT_EQ(seen, std::vector<float>(1000, 3.0f));
  });
}

TEST(LifetimeTest, MemoryWrittenByAnEnqueuedFunctionOutlivesItsHandles) {
  run_with_deadline([] {
    ev::Stream s;
    ev::UserEvent gate;
    s.wait(gate);
    {
      ev::Tensor out = ev::empty({1 << 16});
      out.wait();
      float* raw = out.data<float>();
      s.enqueue(
          "late_write",
          [raw] {
            for (int i = 0; i < (1 << 16); ++i) raw[i] = 1.0f;
          },
          {}, {out});
    }  // nobody will ever read it, but the op still writes it: the memory must be there
    gate.set();
    s.synchronize();
  });
}

TEST(LifetimeTest, ATensorProducedOnOneStreamAndReadOnAnotherSurvivesDroppedHandles) {
  run_with_deadline([] {
    ev::Tensor result;
    {
      ev::Stream a, b;
      ev::Tensor t = slow_tensor(a, 30ms, 2.0f, {256});
      ev::StreamGuard g(b);
      result = ev::mul(t, t);
    }  // both streams and t dropped while a's slow op runs
    EXPECT_EQ(result.to_vector<float>(), std::vector<float>(256, 4.0f));
  });
}

TEST(LifetimeTest, DroppingAnUnreadOutputWhileItsOpIsPendingIsHarmless) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    {
      ev::StreamGuard g(s);
      ev::Tensor a = ev::rand({32, 32});
      (void)ev::matmul(a, a);  // the output is dropped at once
      (void)ev::add(a, a);
    }
    ev::Event e = s.record_event();
    gate.set();
    e.wait();
    EXPECT_EQ(s.error(), nullptr);
  });
}

TEST(LifetimeTest, DroppingStreamsWithChainsOfPendingWorkLosesNothing) {
  run_with_deadline([] {
    std::atomic<int> ran{0};
    ev::UserEvent gate;
    std::vector<ev::Event> ends;
    for (int i = 0; i < 8; ++i) {
      ev::Stream s = gated_stream(gate);
      for (int j = 0; j < 10; ++j) s.enqueue("count", [&] { ran.fetch_add(1); });
      ends.push_back(s.record_event());
    }  // every Stream handle is gone
    gate.set();
    ev::wait_all(ends);
    EXPECT_EQ(ran.load(), 80);
  });
}

TEST(LifetimeTest, CallbacksOfAnEventWhoseHandlesAreDroppedStillRun) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    auto event_flag = std::make_shared<Flag>();
    auto tensor_flag = std::make_shared<Flag>();
    {
      ev::Event e = s.enqueue("held", [] {});
      e.add_callback([event_flag] { event_flag->set(); });
      ev::StreamGuard g(s);
      ev::Tensor t = ev::ones({4});
      t.add_completion_callback([tensor_flag] { tensor_flag->set(); });
    }  // the event and the tensor are gone
    gate.set();
    EXPECT_TRUE(event_flag->wait_for(30s));
    EXPECT_TRUE(tensor_flag->wait_for(30s));
  });
}

TEST(LifetimeTest, ACallbackMayHoldAndDropTheLastHandles) {
  run_with_deadline([] {
    auto done = std::make_shared<Flag>();
    {
      ev::Stream s;
      ev::Tensor t = ev::ones({16});
      ev::Event e;
      e.record(t);
      // The callable owns the last handles of its own event, a tensor and a stream; they are
      // released on the callback thread once it has run (LeakSanitizer checks nothing leaks).
      e.add_callback([e, t, s, done] {
        EXPECT_TRUE(t.ready());
        EXPECT_TRUE(e.poll());
        done->set();
      });
    }
    EXPECT_TRUE(done->wait_for(30s));
  });
}

TEST(LifetimeTest, UserEventCopiesInStreamsKeepWaitersWorking) {
  run_with_deadline([] {
    ev::Stream s;
    ev::Event after;
    {
      ev::UserEvent u;
      s.wait(u);
      after = s.enqueue("after", [] {});
      ev::UserEvent keep = u;
      std::thread([keep]() mutable {
        std::this_thread::sleep_for(10ms);
        keep.set();
      }).detach();
    }  // this thread's handles are gone; the detached thread's copy sets it
    EXPECT_NO_THROW(after.wait());
  });
}

// The process exits cleanly (no hang, no crash) with work still queued and running, tensors
// and streams alive in statics, and callbacks pending: checked in a child process.
void exit_with_pending_work_in_child() {
  static ev::Tensor static_tensor = ev::ones({1024});
  static ev::Stream static_stream;
  static ev::UserEvent never_set;
  static_stream.enqueue("running at exit", [] { std::this_thread::sleep_for(50ms); });
  static_stream.wait(never_set);
  static_stream.enqueue("queued at exit", [] { std::abort(); });  // must never run
  ev::Stream other;
  ev::StreamGuard g(other);
  ev::Tensor big = ev::matmul(ev::rand({256, 256}), ev::rand({256, 256}));
  ev::Event e;
  e.record(big);
  e.add_callback([] {});
  std::this_thread::sleep_for(5ms);  // let the first op start
  std::fprintf(stderr, "CHILD-EXITING\n");
  std::exit(0);
}

TEST(LifetimeDeathTest, TheProcessExitsCleanlyWithWorkPending) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  run_with_deadline([] {
    EXPECT_EXIT(exit_with_pending_work_in_child(), ::testing::ExitedWithCode(0), "CHILD-EXITING");
  });
}

// GUARANTEES.md: at exit running work gets up to 5 seconds per thread, then the process ends
// even if user code blocks.
void exit_while_a_function_blocks_in_child() {
  static ev::Stream s;
  s.enqueue("blocks forever", [] {
    for (;;) std::this_thread::sleep_for(1s);
  });
  std::this_thread::sleep_for(10ms);  // let it start
  std::fprintf(stderr, "CHILD-EXITING\n");
  std::exit(0);
}

TEST(LifetimeDeathTest, TheProcessExitsEvenIfAnEnqueuedFunctionNeverReturns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  run_with_deadline([] {
    const auto t0 = Clock::now();
    EXPECT_EXIT(exit_while_a_function_blocks_in_child(), ::testing::ExitedWithCode(0),
                "CHILD-EXITING");
    EXPECT_LT(seconds_since(t0), 40.0);
  });
}

}  // namespace
