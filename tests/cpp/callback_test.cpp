// Callbacks: Event::add_callback and Tensor::add_completion_callback run once each, on a
// runtime thread, also for failed work and when added after completion; a throwing callback
// is reported and does not stop the others; callbacks may call any eventide API. A callback
// taken back (Event::remove_callback, for Python's cancelled awaits) never runs and is
// freed at once, with the event if nothing else holds it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dispatcher.hpp"
#include "core/event_state.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;

// Waits until the callbacks queued so far on both callback threads (the cpu device's and the
// host one's, for UserEvents) have run: each runs its callbacks in order. (Callbacks of an
// event are queued by whichever thread sees it finish, which may be a little after wait()
// returned elsewhere: counting tests use wait_for_count first.)
void flush_callbacks() {
  Flag cpu_done, host_done;
  ev::Event cpu(ev::Device::cpu());
  cpu.record(ev::Stream(ev::Device::cpu()));  // finished at once, on cpu
  cpu.add_callback([&] { cpu_done.set(); });
  ev::UserEvent host;
  host.set();
  host.add_callback([&] { host_done.set(); });
  ASSERT_TRUE(cpu_done.wait_for(60s));
  ASSERT_TRUE(host_done.wait_for(60s));
}

// Installs a callback error handler for the scope of a test, then restores the default.
class HandlerScope {
 public:
  explicit HandlerScope(ev::CallbackErrorHandler h) { ev::set_callback_error_handler(std::move(h)); }
  ~HandlerScope() { ev::set_callback_error_handler(nullptr); }
};

TEST(CallbackTest, CallbacksRunOnARuntimeThreadNotTheCallers) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    std::thread::id ran_on;
    bool on_dispatcher = false;
    Flag done;
    e.add_callback([&] {
      ran_on = std::this_thread::get_id();
      on_dispatcher = ev::detail::Dispatcher::on_dispatcher_thread();
      done.set();
    });
    gate.set();  // the completion chain may start on this very thread
    ASSERT_TRUE(done.wait_for(30s));
    EXPECT_NE(ran_on, std::this_thread::get_id());
    EXPECT_TRUE(on_dispatcher) << "not on the runtime's callback thread";
  });
}

TEST(CallbackTest, ACallbackAddedAfterCompletionRunsOnTheRuntimeThread) {
  run_with_deadline([] {
    ev::Event e;
    e.record(ev::ones({1}));
    e.wait();
    std::thread::id ran_on;
    bool on_dispatcher = false;
    Flag done;
    e.add_callback([&] {
      ran_on = std::this_thread::get_id();
      on_dispatcher = ev::detail::Dispatcher::on_dispatcher_thread();
      done.set();
    });
    ASSERT_TRUE(done.wait_for(30s));
    EXPECT_NE(ran_on, std::this_thread::get_id()) << "ran inside add_callback";
    EXPECT_TRUE(on_dispatcher);
    // Same for a tensor that is already ready, and for a set UserEvent.
    Flag t_done, u_done;
    std::thread::id t_on, u_on;
    ev::Tensor t = ev::ones({1});
    t.wait();
    t.add_completion_callback([&] {
      t_on = std::this_thread::get_id();
      t_done.set();
    });
    ev::UserEvent u;
    u.set();
    u.add_callback([&] {
      u_on = std::this_thread::get_id();
      u_done.set();
    });
    ASSERT_TRUE(t_done.wait_for(30s));
    ASSERT_TRUE(u_done.wait_for(30s));
    EXPECT_NE(t_on, std::this_thread::get_id());
    EXPECT_NE(u_on, std::this_thread::get_id());
  });
}

TEST(CallbackTest, EachCallbackRunsExactlyOnceAlsoWhenTheEventFailed) {
  run_with_deadline([] {
    const int n = iterations(500);
    const int bad_count = (n + 2) / 3;
    SharedCount ok_calls = make_count(), failed_calls = make_count(), saw_error = make_count();
    ev::Stream s;
    for (int i = 0; i < n; ++i) {
      const bool bad = i % 3 == 0;
      ev::Event e = bad ? s.enqueue("bad", [] { throw UserError("x"); }) : s.enqueue("ok", [] {});
      e.add_callback([ok_calls, failed_calls, saw_error, e, bad] {
        (bad ? *failed_calls : *ok_calls).fetch_add(1);
        if (bad && e.error()) saw_error->fetch_add(1);
      });
    }
    s.synchronize();
    EXPECT_TRUE(wait_for_count(*failed_calls, bad_count));
    EXPECT_TRUE(wait_for_count(*ok_calls, n - bad_count));
    flush_callbacks();
    std::this_thread::sleep_for(20ms);  // time for a (wrong) second call to show
    EXPECT_EQ(failed_calls->load(), bad_count);
    EXPECT_EQ(ok_calls->load(), n - bad_count);
    EXPECT_EQ(saw_error->load(), bad_count) << "error() not visible inside the callback";
  });
}

TEST(CallbackTest, SeveralCallbacksOnOneEventEachRunOnce) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    SharedCount calls = make_count();
    for (int i = 0; i < 10; ++i) e.add_callback([calls] { calls->fetch_add(1); });
    gate.set();
    e.wait();
    for (int i = 0; i < 5; ++i) e.add_callback([calls] { calls->fetch_add(1); });
    EXPECT_TRUE(wait_for_count(*calls, 15));
    flush_callbacks();
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(calls->load(), 15);
  });
}

TEST(CallbackTest, ManyCallbacksFromSeveralThreadsUnderLoadAreCountedExactly) {
  for_thread_counts([](int threads) {
    const int per_thread = iterations(300) / threads + 1;
    SharedCount calls = make_count();
    run_threads(threads, [&](int) {
      ev::Stream s;
      ev::StreamGuard g(s);
      ev::Tensor a = ev::rand({16, 16});
      for (int i = 0; i < per_thread; ++i) {
        ev::Tensor b = ev::matmul(a, a);
        b.add_completion_callback([calls] { calls->fetch_add(1); });  // pending or not
        ev::Event e;
        e.record(b);
        e.add_callback([calls] { calls->fetch_add(1); });
        if (i % 8 == 0) b.wait();
        e.add_callback([calls] { calls->fetch_add(1); });
      }
    });
    const int want = 3 * per_thread * threads;
    EXPECT_TRUE(wait_for_count(*calls, want)) << calls->load() << " of " << want;
    flush_callbacks();
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(calls->load(), want);
  });
}

TEST(CallbackTest, AThrowingCallbackIsReportedAndTheNextOnesStillRun) {
  run_with_deadline([] {
    std::mutex mu;
    std::vector<std::string> reports;
    bool was_user_error = false;
    HandlerScope scope([&](std::exception_ptr error, std::string_view where) {
      std::lock_guard lock(mu);
      was_user_error = holds<UserError>(error);
      reports.push_back(std::string(where) + " | " + what(error));
    });
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    Flag next_ran;
    e.add_callback([] { throw UserError("callback failure"); });
    e.add_callback([&] { next_ran.set(); });
    gate.set();
    ASSERT_TRUE(next_ran.wait_for(30s)) << "a throwing callback stopped the next one";
    flush_callbacks();
    std::lock_guard lock(mu);
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_TRUE(was_user_error);
    EXPECT_NE(reports[0].find("callback failure"), std::string::npos) << reports[0];
    EXPECT_NE(reports[0].find("callback of <Event"), std::string::npos) << reports[0];
    // The runtime goes on: more callbacks, more work.
    Flag later;
    ev::Tensor t = ev::ones({2});
    t.add_completion_callback([&] { later.set(); });
    EXPECT_TRUE(later.wait_for(30s));
  });
}

TEST(CallbackTest, TheDefaultHandlerPrintsToStderr) {
  run_with_deadline([] {
    ev::set_callback_error_handler(nullptr);
    ::testing::internal::CaptureStderr();
    ev::Event e;
    e.record(ev::ones({1}));
    e.wait();  // finished: the callback is queued at once, before flush_callbacks' ones
    e.add_callback([] { throw UserError("printed failure"); });
    flush_callbacks();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("printed failure"), std::string::npos) << err;
    EXPECT_NE(err.find("callback"), std::string::npos) << err;
  });
}

TEST(CallbackTest, AThrowingHandlerIsItselfReportedToStderr) {
  run_with_deadline([] {
    HandlerScope scope([](std::exception_ptr, std::string_view) {
      throw UserError("handler failure");
    });
    ::testing::internal::CaptureStderr();
    ev::Event e;
    e.record(ev::ones({1}));
    e.wait();
    e.add_callback([] { throw UserError("original failure"); });
    flush_callbacks();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("handler failure"), std::string::npos) << err;
  });
}

TEST(CallbackTest, ACallbackMayCallAnyEventideApi) {
  run_with_deadline([] {
    ev::UserEvent released;  // set by the test while the callback waits on it
    ev::Event e;
    e.record(ev::ones({2}));
    Flag started, done;
    std::vector<float> product;
    std::exception_ptr failure;
    std::atomic<bool> nested_ran{false};
    e.add_callback([&, e]() mutable {
      started.set();
      try {
        ev::Tensor a = ev::full({2, 2}, 2.0);
        ev::Tensor b = ev::matmul(a, a);
        ev::Event inner;
        inner.record(b);
        inner.wait();
        product = b.to_vector<float>();
        released.wait();  // blocks on host code
        ev::Stream s;
        s.enqueue("from a callback", [] {}).wait();
        ev::UserEvent u;
        s.wait(u);
        ev::Event after = s.enqueue("after", [] {});
        u.set();
        after.wait();
        e.add_callback([&] { nested_ran = true; });  // on an event already finished
        (void)e.time_elapsed();
        ev::wait_all({inner, after});
        ev::synchronize();
      } catch (...) {
        failure = std::current_exception();
      }
      done.set();
    });
    ASSERT_TRUE(started.wait_for(30s));
    std::this_thread::sleep_for(10ms);
    released.set();
    ASSERT_TRUE(done.wait_for(60s)) << "a callback calling eventide deadlocked";
    EXPECT_EQ(failure, nullptr) << what(failure);
    EXPECT_EQ(product, std::vector<float>(4, 8.0f));
    flush_callbacks();
    EXPECT_TRUE(nested_ran.load());
  });
}

TEST(CallbackTest, ACallbackMayResetAndReRecordItsOwnEvent) {
  run_with_deadline([] {
    ev::Event e;
    e.record(ev::ones({1}));
    Flag done;
    e.add_callback([&, e]() mutable {
      e.reset();
      e.record(ev::zeros({1}));
      e.wait();
      done.set();
    });
    ASSERT_TRUE(done.wait_for(30s));
    EXPECT_TRUE(e.poll());
  });
}

// --- Taking a callback back ----------------------------------------------------------------

TEST(CallbackTest, ACallbackTakenBackNeverRunsAndIsDestroyedAtOnce) {
  run_with_deadline([] {
    ev::UserEvent u;
    SharedCount calls = make_count(), kept_calls = make_count();
    auto token = std::make_shared<int>(0);
    std::weak_ptr<int> callable_alive = token;
    const auto id = u.add_callback([calls, token = std::move(token)] { calls->fetch_add(1); });
    EXPECT_NE(id, 0u);
    u.add_callback([kept_calls] { kept_calls->fetch_add(1); });
    EXPECT_TRUE(u.remove_callback(id));
    EXPECT_TRUE(callable_alive.expired()) << "the callable outlived remove_callback()";
    EXPECT_FALSE(u.remove_callback(id)) << "taken back twice";
    u.set();
    EXPECT_TRUE(wait_for_count(*kept_calls, 1)) << "the other callback did not run";
    flush_callbacks();
    EXPECT_EQ(calls->load(), 0) << "a callback taken back ran";
  });
}

TEST(CallbackTest, TakingBackACallbackHandedOverToRunIsFalseAndItRunsOnce) {
  run_with_deadline([] {
    ev::UserEvent u;
    SharedCount calls = make_count();
    const auto id = u.add_callback([calls] { calls->fetch_add(1); });
    u.set();  // handed to the dispatcher: queued, running or done
    EXPECT_FALSE(u.remove_callback(id));
    // Added to a finished event: handed over at once.
    const auto late = u.add_callback([calls] { calls->fetch_add(1); });
    EXPECT_NE(late, id);
    EXPECT_FALSE(u.remove_callback(late));
    EXPECT_TRUE(wait_for_count(*calls, 2));
    EXPECT_FALSE(u.remove_callback(late + 1000)) << "an unknown id";
    flush_callbacks();
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(calls->load(), 2);
  });
}

TEST(CallbackTest, TakingBackTheLastCallbackLetsGoOfAnEventNobodyHolds) {
  // The listener on the pending work holds the event, so that callbacks run when every handle
  // is gone. Once the last callback is taken back, the listener is taken back too: an event
  // nobody holds is freed at once, not when its work finishes (a Python `await tensor` given
  // up makes such an event each time).
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::weak_ptr<ev::detail::EventState> state;
    {
      ev::Event e = s.enqueue("held", [] {});
      state = e.state();
      for (int i = 0; i < 3; ++i) {
        const auto id = e.add_callback([] {});
        EXPECT_TRUE(e.remove_callback(id));
      }
    }
    EXPECT_TRUE(state.expired()) << "the event outlived its last handle and callback";
    // A callback not taken back keeps the event, and runs.
    SharedCount calls = make_count();
    {
      ev::Event e = s.enqueue("held", [] {});
      state = e.state();
      const auto gone = e.add_callback([calls] { calls->fetch_add(100); });
      e.add_callback([calls] { calls->fetch_add(1); });
      EXPECT_TRUE(e.remove_callback(gone));
    }
    EXPECT_FALSE(state.expired()) << "an event with a callback left was freed";
    gate.set();
    EXPECT_TRUE(wait_for_count(*calls, 1));
    flush_callbacks();
    EXPECT_EQ(calls->load(), 1);
  });
}

TEST(CallbackTest, CallbacksAndWaitersAfterTheLastCallbackWasTakenBackStillRunAndWake) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Event e = s.enqueue("held", [] {});
    for (int i = 0; i < 100; ++i) {  // armed and taken back, over and over
      EXPECT_TRUE(e.remove_callback(e.add_callback([] {})));
    }
    SharedCount calls = make_count();
    e.add_callback([calls] { calls->fetch_add(1); });
    std::atomic<bool> woke{false};
    std::thread waiter([&] { woke = e.wait_for(60s); });
    std::this_thread::sleep_for(20ms);  // the waiter registers
    const auto id = e.add_callback([] {});
    EXPECT_TRUE(e.remove_callback(id));  // not the last: the event stays armed
    gate.set();
    waiter.join();
    EXPECT_TRUE(woke.load()) << "a waiter was not woken";
    EXPECT_TRUE(wait_for_count(*calls, 1)) << "a callback was not run";
    // A waiter alone, after the only callback was taken back.
    ev::UserEvent gate2;
    ev::Stream s2 = gated_stream(gate2);
    ev::Event e2 = s2.enqueue("held", [] {});
    EXPECT_TRUE(e2.remove_callback(e2.add_callback([] {})));
    std::thread setter([&] {
      std::this_thread::sleep_for(20ms);
      gate2.set();
    });
    EXPECT_TRUE(e2.wait_for(60s)) << "a waiter after a callback was taken back was not woken";
    setter.join();
  });
}

TEST(CallbackTest, TakingBackRacingCompletionEitherTakesBackOrRunsEachCallbackOnce) {
  // Callbacks fire on other threads while they are taken back: each one is either taken back
  // (true: it never runs) or runs exactly once (false), whatever the interleaving.
  for_thread_counts([](int threads) {
    const int rounds = std::max(4, iterations(40));
    const int per_thread = 64;
    const int total = rounds * threads * per_thread;
    auto ran = std::make_shared<std::vector<std::atomic<int>>>(static_cast<std::size_t>(total));
    std::vector<char> taken_back(static_cast<std::size_t>(total), 0);
    for (int round = 0; round < rounds; ++round) {
      ev::UserEvent u;
      Latch start(threads + 1);
      run_threads(threads + 1, [&](int id) {
        if (id == threads) {
          start.arrive_and_wait();
          std::this_thread::sleep_for(std::chrono::microseconds(50 * (round % 8)));
          u.set();
          return;
        }
        start.arrive_and_wait();
        std::mt19937 rng(static_cast<unsigned>(round * 131 + id));
        for (int i = 0; i < per_thread; ++i) {
          const std::size_t slot = static_cast<std::size_t>((round * threads + id) * per_thread + i);
          const auto cb_id = u.add_callback([ran, slot] { (*ran)[slot].fetch_add(1); });
          if (rng() % 4 != 0) taken_back[slot] = u.remove_callback(cb_id) ? 1 : 0;
        }
      });
    }
    int want = 0;
    for (char t : taken_back) want += t == 0;
    const auto end = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      int n = 0;
      for (auto& r : *ran) n += r.load();
      if (n >= want || std::chrono::steady_clock::now() > end) break;
      std::this_thread::sleep_for(1ms);
    }
    flush_callbacks();
    int wrong = 0;
    for (std::size_t i = 0; i < taken_back.size(); ++i) wrong += (*ran)[i].load() + taken_back[i] != 1;
    EXPECT_EQ(wrong, 0) << "callbacks taken back and run, or neither, or run twice (of " << total << ")";
  });
}

TEST(CallbackTest, TargetFindsTheCallableOfItsOwnTypeOnly) {
  struct Small {
    int v;
    void operator()() {}
  };
  struct Big {
    char pad[200];
    void operator()() {}
  };
  ev::detail::Callback small(Small{7});
  ev::detail::Callback big(Big{});
  ASSERT_NE(small.target<Small>(), nullptr);
  EXPECT_EQ(small.target<Small>()->v, 7);
  EXPECT_EQ(small.target<Big>(), nullptr);
  EXPECT_NE(big.target<Big>(), nullptr);
  EXPECT_EQ(big.target<Small>(), nullptr);
  ev::detail::Callback empty;
  EXPECT_EQ(empty.target<Small>(), nullptr);
}

// The tutorial's pattern: a completion callback sets a flag that another thread waits for
// with a condition variable.
TEST(CallbackTest, TutorialPatternCompletionCallbackWakesAConditionVariableWaiter) {
  run_with_deadline([] {
    for (int round = 0; round < iterations(200); ++round) {
      std::mutex mu;
      std::condition_variable cv;
      bool flag = false;
      ev::Tensor a = ev::rand({32, 32}), b = ev::rand({32, 32});
      ev::Tensor out = ev::matmul(a, b);
      std::thread consumer([&] {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return flag; })) << "round " << round;
        EXPECT_TRUE(out.ready());
      });
      out.add_completion_callback([&] {
        std::lock_guard lock(mu);
        flag = true;
        cv.notify_all();
      });
      consumer.join();
    }
    flush_callbacks();  // no callback may touch this round's locals after they are gone
  });
}

}  // namespace
