// eventide/coro.hpp with the tests' own coroutine type (coro_task.hpp): what co_await
// resumes with, where, and that a wait withdrawn (a stop, a timeout, a destroyed frame)
// leaves no callback behind and never resumes twice. The races (completion against
// await_suspend, against a stop, against the frame's destruction) run many times at several
// thread counts. asio's coroutines are in coro_asio_test.
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include <eventide/coro.hpp>

#include "coro_util.hpp"

namespace eventide_test {
namespace {

StopTask await_with_own_token(ev::Event e, ProbePtr p) {
  try {
    co_await e;
    p->resumed();
  } catch (...) {
    p->resumed();
    p->error = std::current_exception();
  }
}
Task await_tensor_then_read(ev::Tensor t, ProbePtr p, std::shared_ptr<std::vector<float>> out) {
  try {
    co_await t;
    p->resumed();
    *out = t.to_vector<float>();  // finished: no wait
  } catch (...) {
    p->resumed();
    p->error = std::current_exception();
  }
}

TEST(CoroTest, AFinishedEventResumesWithoutSuspending) {
  run_with_deadline([] {
    ev::Tensor t = ev::full({4}, 2.0, ev::DType::f32, ev::Device::cpu());
    t.wait();
    ev::Event e;
    e.record(t);
    ProbePtr p = probe();
    Task task = await_void(e, p);
    // Ended inside the call: it never suspended, so it ran on this thread.
    ASSERT_TRUE(task.done());
    EXPECT_EQ(p->thread, std::this_thread::get_id());
    EXPECT_EQ(p->error, nullptr);
  });
}

TEST(CoroTest, AUserEventSetElsewhereResumesOnTheCallbackThreadWithNoRuntimeLockHeld) {
  run_with_deadline([] {
    ev::UserEvent u;
    ProbePtr p = probe();
    Task task = await_void(ev::Event(u), p);
    EXPECT_FALSE(task.done());
    EXPECT_EQ(pending_callbacks(u), 1);
    std::thread::id setter;
    std::thread([&] {
      setter = std::this_thread::get_id();
      u.set();
    }).join();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_EQ(p->error, nullptr) << what(p->error);
    EXPECT_EQ(p->resumes.load(), 1);
    EXPECT_NE(p->thread, setter);  // never inside set()
    EXPECT_NE(p->thread, std::this_thread::get_id());
    EXPECT_EQ(p->locks_held, 0);
  });
}

TEST(CoroTest, TheErrorOfAFailedUserEventIsRethrownFromCoAwait) {
  run_with_deadline([] {
    ev::UserEvent u;
    ProbePtr p = probe();
    Task task = await_void(ev::Event(u), p);
    u.fail(std::make_exception_ptr(UserError("no input")));
    ASSERT_TRUE(task.wait_done(30s));
    ASSERT_TRUE(holds<UserError>(p->error)) << what(p->error);
    EXPECT_EQ(what(p->error), "no input");
  });
}

TEST(CoroTest, ATensorResumesOnceItsOpHasFinishedAndAFailedOpRethrowsItsOpError) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::full({3}, 5.0, ev::DType::f32, ev::Device::cpu());
    }
    ProbePtr p = probe();
    auto values = std::make_shared<std::vector<float>>();
    Task task = await_tensor_then_read(t, p, values);
    EXPECT_FALSE(task.done());
    gate.set();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_EQ(p->error, nullptr) << what(p->error);
    EXPECT_EQ(*values, (std::vector<float>{5, 5, 5}));

    ev::Stream s2(ev::Device::cpu());
    ev::Event boom = s2.enqueue("boom", [] { throw UserError("boom"); });
    ProbePtr q = probe();
    Task failing = await_void(boom, q);
    ASSERT_TRUE(failing.wait_done(30s));
    ASSERT_TRUE(holds<ev::OpError>(q->error)) << what(q->error);
    EXPECT_NE(what(q->error).find("boom"), std::string::npos) << what(q->error);
  });
}

TEST(CoroTest, AnEmptyEventIsTheStateErrorOfWaitAndAnUndefinedTensorAnInvalidArgument) {
  run_with_deadline([] {
    ProbePtr p = probe();
    Task task = await_void(ev::Event(), p);
    ASSERT_TRUE(task.done());
    EXPECT_THROW_MSG(std::rethrow_exception(p->error), ev::StateError, "empty", "record work");
    EXPECT_THROW_MSG((void)(ev::Tensor() | ev::timeout(1s)), ev::InvalidArgument, "undefined");
    EXPECT_THROW_MSG((void)ev::when_any(std::span<const ev::Event>()), ev::InvalidArgument, "empty");
    ProbePtr q = probe();
    ev::UserEvent u;
    Task in_list = await_void(ev::when_all(u, ev::Event()), q);
    ASSERT_TRUE(in_list.done());
    EXPECT_THROW_MSG(std::rethrow_exception(q->error), ev::StateError, "event 1", "empty");
    EXPECT_EQ(pending_callbacks(u), 0);
  });
}

TEST(CoroTest, WhenAllResumesOnceEveryEventHasFinished) {
  run_with_deadline([] {
    ev::UserEvent a, b;
    ev::Tensor ready = ev::ones({2}, ev::DType::f32, ev::Device::cpu());
    ProbePtr p = probe();
    Task task = await_void(ev::when_all(a, ready, b), p);
    a.set();
    EXPECT_FALSE(task.wait_done(20ms));
    b.set();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_EQ(p->error, nullptr) << what(p->error);
    EXPECT_EQ(p->resumes.load(), 1);

    ProbePtr none = probe();
    Task empty = await_void(ev::when_all(), none);
    EXPECT_TRUE(empty.done());
  });
}

TEST(CoroTest, WhenAllRethrowsAFailureAsSoonAsItIsSeenAndWithdrawsTheRest) {
  run_with_deadline([] {
    ev::UserEvent a, b;
    ProbePtr p = probe();
    Task task = await_void(ev::when_all(a, b), p);
    b.fail(std::make_exception_ptr(UserError("b failed")));
    ASSERT_TRUE(task.wait_done(30s));  // a is still pending
    EXPECT_EQ(what(p->error), "b failed");
    EXPECT_EQ(pending_callbacks(a), 0);
    a.set();
  });
}

TEST(CoroTest, WhenAnyGivesTheIndexOfTheFirstToFinish) {
  run_with_deadline([] {
    ev::UserEvent a, b, c;
    ProbePtr p = probe();
    Task task = await_index(ev::when_any(a, b, c), p);
    b.set();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_EQ(p->index, std::optional<std::size_t>(1));
    EXPECT_EQ(pending_callbacks(a), 0);
    EXPECT_EQ(pending_callbacks(c), 0);
    // Already finished: the lowest index among those finished, without suspending.
    c.set();
    ProbePtr q = probe();
    Task ready = await_index(ev::when_any(a, c, b), q);
    ASSERT_TRUE(ready.done());
    EXPECT_EQ(q->index, std::optional<std::size_t>(1));
    // A failed event counts as finished.
    ev::UserEvent d;
    ProbePtr r = probe();
    Task failing = await_index(ev::when_any(a, d), r);
    d.fail(std::make_exception_ptr(UserError("d")));
    ASSERT_TRUE(failing.wait_done(30s));
    EXPECT_EQ(r->index, std::optional<std::size_t>(1));
    EXPECT_EQ(r->error, nullptr);
    a.set();
  });
}

TEST(CoroTest, TheTimeoutFormResumesWithFalseWhenTheTimeRunsOutAndLeavesNoCallback) {
  run_with_deadline([] {
    ev::UserEvent u;
    ProbePtr p = probe();
    const auto t0 = Clock::now();
    Task task = await_timed(u | ev::timeout(30ms), p);
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_GE(Clock::now() - t0, 30ms);
    EXPECT_EQ(p->in_time, std::optional<bool>(false));
    EXPECT_NE(p->thread, std::this_thread::get_id());
    EXPECT_EQ(p->locks_held, 0);
    EXPECT_EQ(pending_callbacks(u), 0);

    ProbePtr q = probe();
    Task in_time = await_timed(ev::when_all(u) | ev::timeout(30s), q);
    u.set();
    ASSERT_TRUE(in_time.wait_done(30s));
    EXPECT_EQ(q->in_time, std::optional<bool>(true));

    ev::UserEvent v;
    ProbePtr r = probe();
    Task any = await_index(ev::when_any(v) | ev::timeout(10ms), r);
    ASSERT_TRUE(any.wait_done(30s));
    EXPECT_EQ(r->error, nullptr) << what(r->error);
    EXPECT_EQ(r->index, std::nullopt);
    EXPECT_EQ(pending_callbacks(v), 0);

    ProbePtr s = probe();
    Task past = await_timed(v | ev::deadline(Clock::now() - 1s), s);
    EXPECT_TRUE(past.done());  // decided at the co_await: no suspension
    EXPECT_EQ(s->in_time, std::optional<bool>(false));
  });
}

TEST(CoroTest, AStopWithdrawsTheWaitAndResumesOnceWithCancelled) {
  run_with_deadline([] {
    ev::UserEvent u;
    std::stop_source stop;
    ProbePtr p = probe();
    Task task = await_void(u | ev::cancel_on(stop.get_token()), p);
    EXPECT_FALSE(task.wait_done(10ms));
    stop.request_stop();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_THROW_MSG(std::rethrow_exception(p->error), ev::Cancelled, "cancelled", "UserEvent");
    EXPECT_NE(p->thread, std::this_thread::get_id());  // not inside request_stop()
    EXPECT_EQ(p->locks_held, 0);
    EXPECT_EQ(pending_callbacks(u), 0);
    u.set();
    std::this_thread::sleep_for(5ms);
    EXPECT_EQ(p->resumes.load(), 1);

    // Stopped before the co_await: cancelled without suspending.
    ev::UserEvent v;
    ProbePtr q = probe();
    Task early = await_void(ev::when_all(v, u) | ev::cancel_on(stop.get_token()), q);
    ASSERT_TRUE(early.done());
    EXPECT_THROW_MSG(std::rethrow_exception(q->error), ev::Cancelled, "when_all of 2 events");
    EXPECT_EQ(pending_callbacks(v), 0);
  });
}

TEST(CoroTest, ThePromisesOwnStopTokenCancelsWhenTheAwaitNamesNone) {
  run_with_deadline([] {
    ev::UserEvent u;
    ProbePtr p = probe();
    StopTask task = await_with_own_token(u, p);
    EXPECT_FALSE(task.done());
    task.request_stop();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_TRUE(holds<ev::Cancelled>(p->error)) << what(p->error);
    EXPECT_EQ(pending_callbacks(u), 0);
  });
}

TEST(CoroTest, DestroyingASuspendedFrameWithdrawsItsWaitAndItNeverResumes) {
  run_with_deadline([] {
    ev::UserEvent u;
    std::stop_source stop;
    ProbePtr p = probe();
    {
      Task task = await_timed(ev::when_all(u) | ev::timeout(50ms) | ev::cancel_on(stop.get_token()), p);
      EXPECT_EQ(pending_callbacks(u), 1);
    }  // destroyed while suspended
    EXPECT_EQ(pending_callbacks(u), 0);
    std::this_thread::sleep_for(80ms);  // past the deadline: the timer was withdrawn too
    stop.request_stop();
    u.set();
    std::this_thread::sleep_for(5ms);
    EXPECT_EQ(p->resumes.load(), 0);
  });
}

TEST(CoroTest, ResumeOnHandsTheResumptionToTheExecutor) {
  run_with_deadline([] {
    OneThreadPool pool;
    ev::UserEvent u;
    ProbePtr p = probe();
    Task task = await_void(u | ev::resume_on(PoolRef{&pool}), p);
    u.set();
    ASSERT_TRUE(task.wait_done(30s));
    EXPECT_EQ(p->thread, pool.id());
    EXPECT_EQ(p->error, nullptr) << what(p->error);
    // A stop, too, resumes it there.
    ev::UserEvent v;
    std::stop_source stop;
    ProbePtr q = probe();
    Task cancelled = await_void(v | ev::cancel_on(stop.get_token()) | ev::resume_on(PoolRef{&pool}), q);
    stop.request_stop();
    ASSERT_TRUE(cancelled.wait_done(30s));
    EXPECT_EQ(q->thread, pool.id());
    EXPECT_TRUE(holds<ev::Cancelled>(q->error));
  });
}

TEST(CoroTest, AFrameDestroyedBeforeTheExecutorRanItsResumptionIsNotResumed) {
  run_with_deadline([] {
    auto held = std::make_shared<HeldQueue>();
    ev::UserEvent u;
    ProbePtr p = probe();
    auto task = std::make_unique<Task>(await_void(u | ev::resume_on(HeldExecutor{held}), p));
    u.set();
    const auto until = Clock::now() + 30s;
    while (held->size() == 0 && Clock::now() < until) std::this_thread::sleep_for(100us);
    ASSERT_EQ(held->size(), 1u);  // decided and posted, not run
    task.reset();                 // destroyed first
    held->run_all();              // the posted resumption finds it gone
    EXPECT_EQ(p->resumes.load(), 0);
  });
}

TEST(CoroTest, ManyCoroutinesOnOneUserEventEachResumeOnce) {
  for_thread_counts([](int threads) {
    const int per_thread = iterations(300);
    ev::UserEvent u;
    std::vector<std::vector<Task>> tasks(static_cast<std::size_t>(threads));
    std::vector<std::vector<ProbePtr>> probes(static_cast<std::size_t>(threads));
    run_threads(threads, [&](int t) {
      for (int i = 0; i < per_thread; ++i) {
        probes[t].push_back(probe());
        tasks[t].push_back(await_void(ev::Event(u), probes[t].back()));
      }
    });
    EXPECT_EQ(pending_callbacks(u), threads * per_thread);
    u.set();
    for (int t = 0; t < threads; ++t) {
      for (int i = 0; i < per_thread; ++i) {
        ASSERT_TRUE(tasks[t][i].wait_done(30s));
        EXPECT_EQ(probes[t][i]->resumes.load(), 1);
      }
    }
  });
}

// The races. Each round: a UserEvent, a coroutine awaiting it, and the set() on another
// thread at the same moment as the co_await itself, a stop, or the frame's destruction.
TEST(CoroTest, CompletionRacingTheCoAwaitResumesExactlyOnce) {
  for_thread_counts([](int threads) {
    const int rounds = iterations(400);
    run_threads(threads, [&](int) {
      for (int i = 0; i < rounds; ++i) {
        ev::UserEvent u;
        ProbePtr p = probe();
        std::thread setter([u]() mutable { u.set(); });
        Task task = await_void(ev::Event(u), p);
        setter.join();
        ASSERT_TRUE(task.wait_done(30s));
        ASSERT_EQ(p->resumes.load(), 1);
        ASSERT_EQ(p->error, nullptr);
      }
    });
  });
}

TEST(CoroTest, CompletionRacingAStopResumesExactlyOnceWithOneOfThem) {
  for_thread_counts([](int threads) {
    const int rounds = iterations(300);
    std::atomic<int> finished{0}, cancelled{0};
    run_threads(threads, [&](int) {
      for (int i = 0; i < rounds; ++i) {
        ev::UserEvent u;
        std::stop_source stop;
        ProbePtr p = probe();
        Task task = await_void(ev::when_all(u) | ev::cancel_on(stop.get_token()), p);
        std::thread setter([u]() mutable { u.set(); });
        stop.request_stop();
        setter.join();
        ASSERT_TRUE(task.wait_done(30s));
        ASSERT_EQ(p->resumes.load(), 1);
        if (p->error) {
          ASSERT_TRUE(holds<ev::Cancelled>(p->error)) << what(p->error);
          cancelled.fetch_add(1);
        } else {
          finished.fetch_add(1);
        }
        ASSERT_EQ(pending_callbacks(u), 0);
      }
    });
    EXPECT_EQ(finished.load() + cancelled.load(), threads * rounds);
  });
}

TEST(CoroTest, CompletionRacingATimeoutResumesExactlyOnce) {
  for_thread_counts([](int threads) {
    const int rounds = iterations(200);
    run_threads(threads, [&](int i) {
      for (int r = 0; r < rounds; ++r) {
        ev::UserEvent u;
        ProbePtr p = probe();
        Task task = await_timed(u | ev::timeout(std::chrono::microseconds((r + i) % 50)), p);
        u.set();
        ASSERT_TRUE(task.wait_done(30s));
        ASSERT_EQ(p->resumes.load(), 1);
        ASSERT_TRUE(p->in_time.has_value());
      }
    });
  });
}

TEST(CoroTest, CompletionRacingTheFramesDestructionOnItsExecutorIsSafe) {
  // Destroying a coroutine races its resumption only on another thread; on the thread it
  // resumes on (here the pool's) the two are ordered, and the wait sees which came first.
  for_thread_counts([](int threads) {
    OneThreadPool pool;
    const int rounds = iterations(300);
    std::atomic<int> resumed{0};
    run_threads(threads, [&](int) {
      for (int i = 0; i < rounds; ++i) {
        ev::UserEvent u;
        ProbePtr p = probe();
        auto task = std::make_shared<Task>();
        run_here(pool, [&] { *task = await_void(u | ev::resume_on(PoolRef{&pool}), p); });
        std::thread setter([u]() mutable { u.set(); });
        run_here(pool, [&] { task->destroy(); });
        setter.join();
        run_here(pool, [] {});  // a resumption posted before the destruction has run by now
        ASSERT_LE(p->resumes.load(), 1);
        resumed.fetch_add(p->resumes.load());
        ASSERT_EQ(pending_callbacks(u), 0);
      }
    });
    std::printf("    %d threads: %d of %d resumed before their destruction\n", threads, resumed.load(),
                threads * rounds);
  });
}

}  // namespace
}  // namespace eventide_test
