// The races of eventide/coro.hpp that coro_test does not run: a stop racing the co_await
// itself; the frame destroyed on its executor while an event, a stop and a timeout race to
// decide its wait; when_any and when_all withdrawing every other callback whoever decides; a
// frame destroyed once its stop was decided, whose resumption must then never reach its
// executor (which may be gone with it); and an executor that refuses the resumption. Each runs
// many rounds at several thread counts; ThreadSanitizer and AddressSanitizer runs check that
// no round touches freed memory or races.
#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include <eventide/coro.hpp>

#include "coro_util.hpp"

namespace eventide_test {
namespace {

// Holds the callback thread of host events (a UserEvent's) in a callback until release(), so
// that what is decided meanwhile waits in its queue.
class HeldCallbackThread {
 public:
  HeldCallbackThread() {
    ev::UserEvent blocker;
    blocker.add_callback([entered = entered_, release = release_] {
      entered->set();
      (void)release->wait_for(30s);
    });
    blocker.set();
    EXPECT_TRUE(entered_->wait_for(30s));
  }
  ~HeldCallbackThread() { release(); }
  void release() { release_->set(); }

 private:
  std::shared_ptr<Flag> entered_ = std::make_shared<Flag>();
  std::shared_ptr<Flag> release_ = std::make_shared<Flag>();
};

// Waits until the host callback thread has run everything queued before this call.
void drain_host_callbacks() {
  auto drained = std::make_shared<Flag>();
  ev::UserEvent after;
  after.add_callback([drained] { drained->set(); });
  after.set();
  ASSERT_TRUE(drained->wait_for(30s));
}

// An executor that counts what it is handed and drops it (never runs it).
struct CountingExecutor {
  SharedCount posts;
  void operator()(std::function<void()>) const { posts->fetch_add(1); }
};

// An executor that refuses everything (a pool shut down).
struct RefusingExecutor {
  void post(std::function<void()>) const { throw std::runtime_error("the pool has shut down"); }
};

TEST(CoroRaceTest, AStopRacingTheCoAwaitCancelsOnceAndLeavesNoCallback) {
  for_thread_counts([](int threads) {
    const int rounds = iterations(300);
    run_threads(threads, [&](int) {
      for (int i = 0; i < rounds; ++i) {
        ev::UserEvent u;
        std::stop_source stop;
        ProbePtr p = probe();
        std::thread stopper([&stop] { stop.request_stop(); });
        Task task = await_void(u | ev::cancel_on(stop.get_token()), p);
        stopper.join();
        ASSERT_TRUE(task.wait_done(30s));
        ASSERT_EQ(p->resumes.load(), 1);
        ASSERT_TRUE(holds<ev::Cancelled>(p->error)) << what(p->error);
        ASSERT_EQ(pending_callbacks(u), 0);
      }
    });
  });
}

TEST(CoroRaceTest, TheFrameDestroyedOnItsExecutorWhileAnEventAStopAndATimeoutRaceIsSafe) {
  for_thread_counts([](int threads) {
    OneThreadPool pool;
    const int rounds = iterations(200);
    std::atomic<int> resumed{0};
    run_threads(threads, [&](int t) {
      for (int i = 0; i < rounds; ++i) {
        ev::UserEvent u;
        std::stop_source stop;
        ProbePtr p = probe();
        auto task = std::make_shared<Task>();
        const auto timeout = std::chrono::microseconds((i * 7 + t) % 40);
        run_here(pool, [&] {
          *task = await_timed(u | ev::timeout(timeout) | ev::cancel_on(stop.get_token()) |
                                  ev::resume_on(PoolRef{&pool}),
                              p);
        });
        std::thread setter([u]() mutable { u.set(); });
        std::thread stopper([&stop] { stop.request_stop(); });
        run_here(pool, [&] { task->destroy(); });
        setter.join();
        stopper.join();
        run_here(pool, [] {});  // what was posted before the destruction has run by now
        ASSERT_LE(p->resumes.load(), 1);
        resumed.fetch_add(p->resumes.load());
        ASSERT_EQ(pending_callbacks(u), 0);
      }
    });
    std::printf("    %d threads: %d of %d resumed before their destruction\n", threads, resumed.load(),
                threads * rounds);
  });
}

TEST(CoroRaceTest, WhenAnyAndWhenAllWithdrawEveryOtherCallbackWhoeverDecides) {
  for_thread_counts([](int threads) {
    const int rounds = iterations(200);
    run_threads(threads, [&](int t) {
      for (int i = 0; i < rounds; ++i) {
        std::vector<ev::UserEvent> events(4);
        std::stop_source stop;
        ProbePtr any = probe();
        ProbePtr all = probe();
        Task first = await_index(ev::when_any(events[0], events[1], events[2], events[3]) |
                                     ev::cancel_on(stop.get_token()),
                                 any);
        Task every = await_void(ev::when_all(events[0], events[1], events[2], events[3]) |
                                    ev::cancel_on(stop.get_token()),
                                all);
        // One event set, one failed, and the stop, at once from three threads.
        const std::size_t set = static_cast<std::size_t>(i + t) % 4;
        const std::size_t failed = (set + 1 + static_cast<std::size_t>(i) % 3) % 4;
        std::thread setter([u = events[set]]() mutable { u.set(); });
        std::thread failer([u = events[failed]]() mutable { u.fail(std::make_exception_ptr(UserError("x"))); });
        std::thread stopper([&stop] { stop.request_stop(); });
        setter.join();
        failer.join();
        stopper.join();
        ASSERT_TRUE(first.wait_done(30s));
        ASSERT_TRUE(every.wait_done(30s));
        ASSERT_EQ(any->resumes.load(), 1);
        ASSERT_EQ(all->resumes.load(), 1);
        ASSERT_NE(all->error, nullptr);  // failed or cancelled: never all finished
        if (!any->error) {
          ASSERT_TRUE(any->index == set || any->index == failed) << *any->index;
        } else {
          ASSERT_TRUE(holds<ev::Cancelled>(any->error)) << what(any->error);
        }
        // Resumed: whoever decided took back the other callbacks first.
        for (ev::UserEvent& u : events) ASSERT_EQ(pending_callbacks(u), 0);
      }
    });
  });
}

TEST(CoroRaceTest, AFrameDestroyedOnceItsStopWasDecidedIsNeverHandedToItsExecutor) {
  run_with_deadline([] {
    for (int round = 0; round < 20; ++round) {
      auto posts = make_count();
      ev::UserEvent u;
      std::stop_source stop;
      ProbePtr p = probe();
      auto task = std::make_unique<Task>(
          await_void(u | ev::cancel_on(stop.get_token()) | ev::resume_on(CountingExecutor{posts}), p));
      {
        HeldCallbackThread held;
        stop.request_stop();  // decided: its resumption waits behind the held callback
        task.reset();         // the frame goes, and in a program often what its executor refers to
      }
      drain_host_callbacks();
      ASSERT_EQ(posts->load(), 0) << "round " << round << ": a destroyed frame's resumption was posted";
      ASSERT_EQ(p->resumes.load(), 0);
      ASSERT_EQ(pending_callbacks(u), 0);
    }
  });
}

TEST(CoroRaceTest, AnExecutorThatRefusesTheResumptionResumesTheCoroutineWithItsErrorInEveryForm) {
  run_with_deadline([] {
    ev::UserEvent u, v, w;
    ProbePtr plain = probe(), any = probe(), timed = probe();
    Task a = await_void(u | ev::resume_on(RefusingExecutor{}), plain);
    Task b = await_index(ev::when_any(v) | ev::resume_on(RefusingExecutor{}), any);
    Task c = await_timed(w | ev::timeout(60s) | ev::resume_on(RefusingExecutor{}), timed);
    u.set();
    v.set();
    w.set();
    for (Task* t : {&a, &b, &c}) ASSERT_TRUE(t->wait_done(30s));
    for (const ProbePtr& p : {plain, any, timed}) {
      EXPECT_EQ(p->resumes.load(), 1);
      EXPECT_EQ(what(p->error), "the pool has shut down");
    }
    EXPECT_EQ(any->index, std::nullopt);  // not an index: the error
    EXPECT_EQ(timed->in_time, std::nullopt);
  });
}

}  // namespace
}  // namespace eventide_test
