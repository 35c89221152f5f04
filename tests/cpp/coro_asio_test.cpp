// A real client of eventide/coro.hpp and eventide/asio.hpp: asio's own coroutines
// (asio::awaitable, co_spawn) on an io_context await eventide work and resume on the
// io_context's thread; many at once on one event and on many; cancelled while waiting (asio's
// cancellation and a std::stop_token); a UserEvent set from another thread; and the tests' own
// task type resumed on an asio executor through resume_on. Skipped, saying why, where asio
// (Debian's libasio-dev) is not installed.
#include "test_util.hpp"

#if !EVENTIDE_TEST_HAVE_ASIO

namespace {
TEST(CoroAsioTest, NeedsAsio) {
  GTEST_SKIP() << "standalone asio (asio.hpp) was not found when this test was built: install "
                  "Debian's libasio-dev (scripts/deps.sh test) and configure again";
}
}  // namespace

#else

#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>

#include <atomic>
#include <memory>
#include <stop_token>
#include <thread>
#include <variant>
#include <vector>

#include <eventide/asio.hpp>
#include <eventide/coro.hpp>

#include "coro_task.hpp"

namespace eventide_test {
namespace {

using asio::awaitable;
using asio::use_awaitable;

int pending_callbacks(ev::UserEvent& u) {
  int n = 0;
  u.visit_pending_callbacks([&](ev::detail::Callback&) {
    ++n;
    return 0;
  });
  return n;
}

// What the coroutines saw, checked by the test once io.run() has returned.
struct Seen {
  std::atomic<int> resumed{0};
  std::atomic<int> off_the_io_thread{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> failed{0};
  std::atomic<int> timed_out{0};
  std::atomic<int> stage{0};  // how far a coroutine has come, for a setter that follows it
  void on_io_thread(asio::io_context& io) {
    resumed.fetch_add(1);
    if (!io.get_executor().running_in_this_thread()) off_the_io_thread.fetch_add(1);
  }
};

// Runs io.run() on a thread of its own (the one all coroutines must resume on), then `go`
// on this thread (the setter), and waits for io.run() to return: it returns once every
// coroutine has ended, since a pending eventide wait counts as outstanding work.
template <class Go>
void run_io(asio::io_context& io, Go&& go) {
  std::thread io_thread([&] { io.run(); });
  go();
  io_thread.join();
}

awaitable<void> wait_one(ev::Event e, Seen& seen, asio::io_context& io) {
  co_await ev::async_wait(e, use_awaitable);
  seen.on_io_thread(io);
}

awaitable<void> wait_tensor_and_check(ev::Tensor t, float want, Seen& seen, asio::io_context& io) {
  co_await ev::async_wait(t, use_awaitable);
  seen.on_io_thread(io);
  std::vector<float> v = t.to_vector<float>();
  if (v.empty() || v[0] != want) seen.failed.fetch_add(1);
}

TEST(CoroAsioTest, AwaitableCoroutinesResumeOnTheIoContextsThreadOnOneEventAndOnMany) {
  run_with_deadline([] {
    asio::io_context io;
    Seen seen;
    const int n = iterations(1000);
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::vector<ev::UserEvent> many(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      asio::co_spawn(io, wait_one(gate, seen, io), asio::detached);
      asio::co_spawn(io, wait_one(many[static_cast<std::size_t>(i)], seen, io), asio::detached);
    }
    std::vector<ev::Tensor> tensors;
    {
      ev::StreamGuard g(s);
      for (int i = 0; i < 50; ++i) tensors.push_back(ev::full({8}, i, ev::DType::f32, ev::Device::cpu()));
    }
    for (int i = 0; i < 50; ++i) {
      asio::co_spawn(io, wait_tensor_and_check(tensors[static_cast<std::size_t>(i)], static_cast<float>(i), seen, io),
                     asio::detached);
    }
    run_io(io, [&] {
      // From this thread, while the io_context's thread waits in run().
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      for (auto& u : many) u.set();
      gate.set();
    });
    EXPECT_EQ(seen.resumed.load(), 2 * n + 50);
    EXPECT_EQ(seen.off_the_io_thread.load(), 0);
    EXPECT_EQ(seen.failed.load(), 0);
  });
}

awaitable<void> wait_or_timer(ev::UserEvent u, Seen& seen, asio::io_context& io) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(io, std::chrono::milliseconds(20));
  std::variant<std::monostate, std::monostate> first =
      co_await (ev::async_wait(u, use_awaitable) || timer.async_wait(use_awaitable));
  seen.on_io_thread(io);
  if (first.index() == 1) seen.cancelled.fetch_add(1);  // the timer won: the wait was cancelled
}

awaitable<void> wait_until_stopped(ev::UserEvent u, std::stop_token stop, Seen& seen, asio::io_context& io) {
  try {
    co_await ev::async_wait(u | ev::cancel_on(stop), use_awaitable);
  } catch (const ev::Cancelled&) {
    seen.cancelled.fetch_add(1);
  }
  seen.on_io_thread(io);
}

awaitable<void> wait_for_signal(ev::UserEvent u, asio::cancellation_signal& signal, Seen& seen,
                                asio::io_context& io) {
  try {
    co_await ev::async_wait(u, asio::bind_cancellation_slot(signal.slot(), use_awaitable));
  } catch (const ev::Cancelled& e) {
    if (std::string(e.what()).find("async_wait") != std::string::npos) seen.cancelled.fetch_add(1);
  }
  seen.on_io_thread(io);
}

awaitable<void> emit_later(asio::cancellation_signal& signal, asio::io_context& io) {
  asio::steady_timer timer(io, std::chrono::milliseconds(5));
  co_await timer.async_wait(use_awaitable);
  signal.emit(asio::cancellation_type::terminal);
}

TEST(CoroAsioTest, ACoroutineCancelledWhileWaitingResumesOnItsThreadAndLeavesNoCallback) {
  run_with_deadline([] {
    asio::io_context io;
    Seen seen;
    ev::UserEvent never;  // set only after the io_context is done
    std::stop_source stop;
    asio::cancellation_signal signal;
    const int n = 20;
    for (int i = 0; i < n; ++i) asio::co_spawn(io, wait_or_timer(never, seen, io), asio::detached);
    for (int i = 0; i < n; ++i) asio::co_spawn(io, wait_until_stopped(never, stop.get_token(), seen, io), asio::detached);
    asio::co_spawn(io, wait_for_signal(never, signal, seen, io), asio::detached);
    asio::co_spawn(io, emit_later(signal, io), asio::detached);
    run_io(io, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      stop.request_stop();  // from another thread than the io_context's
    });
    EXPECT_EQ(seen.resumed.load(), 2 * n + 1);
    EXPECT_EQ(seen.cancelled.load(), 2 * n + 1);
    EXPECT_EQ(seen.off_the_io_thread.load(), 0);
    EXPECT_EQ(seen.failed.load(), 0);
    EXPECT_EQ(pending_callbacks(never), 0);
  });
}

awaitable<void> wait_rethrowing(ev::UserEvent u, Seen& seen, asio::io_context& io) {
  try {
    co_await ev::async_wait(u, use_awaitable);
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()) == "no input") seen.failed.fetch_add(1);
  }
  seen.on_io_thread(io);
}

awaitable<void> wait_any_and_timeouts(ev::UserEvent a, ev::UserEvent b, Seen& seen, asio::io_context& io) {
  std::size_t first = co_await ev::async_wait(ev::when_any(a, b), use_awaitable);
  if (first != 1) seen.failed.fetch_add(1);
  seen.stage.store(1);  // the setter may set a now: when_any has seen b first
  co_await ev::async_wait(ev::when_all(a, b), use_awaitable);  // b is set; a is set later
  bool in_time = co_await ev::async_wait(ev::UserEvent() | ev::timeout(std::chrono::milliseconds(5)), use_awaitable);
  if (!in_time) seen.timed_out.fetch_add(1);
  std::optional<std::size_t> none =
      co_await ev::async_wait(ev::when_any(ev::UserEvent()) | ev::timeout(std::chrono::milliseconds(1)), use_awaitable);
  if (!none) seen.timed_out.fetch_add(1);
  seen.on_io_thread(io);
}

TEST(CoroAsioTest, AUserEventSetOrFailedFromAnotherThreadResumesWithItsOutcome) {
  run_with_deadline([] {
    asio::io_context io;
    Seen seen;
    ev::UserEvent failing, a, b;
    asio::co_spawn(io, wait_rethrowing(failing, seen, io), asio::detached);
    asio::co_spawn(io, wait_any_and_timeouts(a, b, seen, io), asio::detached);
    run_io(io, [&] {
      std::thread([&] {
        failing.fail(std::make_exception_ptr(std::runtime_error("no input")));
        b.set();
        while (seen.stage.load() < 1) std::this_thread::sleep_for(std::chrono::microseconds(100));
        a.set();
      }).join();
    });
    EXPECT_EQ(seen.resumed.load(), 2);
    EXPECT_EQ(seen.failed.load(), 1);  // the rethrown "no input"
    EXPECT_EQ(seen.timed_out.load(), 2);
    EXPECT_EQ(seen.off_the_io_thread.load(), 0);
  });
}

// The wait's completion is the io_context's last work, and the context is destroyed as soon as
// run() returns: the thread that posted the completion must be done with the context by then
// (the sanitizer builds catch a post still signalling a destroyed context). Many rounds, with
// asio's coroutines and with a plain callback.
TEST(CoroAsioTest, AnIoContextDestroyedOnceItsLastWaitHasCompletedIsNotTouchedAfterwards) {
  run_with_deadline([] {
    int completed = 0;
    for (int round = 0; round < 200; ++round) {
      auto io = std::make_unique<asio::io_context>();
      Seen seen;
      ev::UserEvent u;
      if (round % 2 == 0) {
        asio::co_spawn(*io, wait_one(u, seen, *io), asio::detached);
      } else {
        ev::async_wait(u, asio::bind_executor(*io, [&](std::exception_ptr error) {
          if (!error) seen.on_io_thread(*io);
        }));
      }
      std::thread io_thread([&] { io->run(); });
      u.set();
      io_thread.join();
      io.reset();
      completed += seen.resumed.load();
      ASSERT_EQ(seen.off_the_io_thread.load(), 0);
    }
    EXPECT_EQ(completed, 200);
  });
}

// The executor by reference: a copy in the frame would keep io.run() going until the frame is
// destroyed (the waits' own copies go once they have resumed).
Task resume_on_io(ev::Event e, const asio::any_io_executor& ex, Seen& seen, asio::io_context& io) {
  co_await (e | ev::resume_on(ex));
  seen.on_io_thread(io);
}

TEST(CoroAsioTest, TheTestsOwnTaskResumesOnAnAsioExecutorThroughResumeOn) {
  run_with_deadline([] {
    asio::io_context io;
    Seen seen;
    ev::UserEvent u;
    // A work-tracking executor: io.run() goes on while the coroutines wait.
    asio::any_io_executor ex = asio::prefer(io.get_executor(), asio::execution::outstanding_work.tracked);
    std::vector<Task> tasks;
    for (int i = 0; i < 100; ++i) tasks.push_back(resume_on_io(u, ex, seen, io));
    ex = asio::any_io_executor();  // the copies in the waits keep io.run() going
    EXPECT_EQ(seen.resumed.load(), 0);
    run_io(io, [&] { u.set(); });
    EXPECT_EQ(seen.resumed.load(), 100);
    EXPECT_EQ(seen.off_the_io_thread.load(), 0);
    for (Task& t : tasks) EXPECT_TRUE(t.done());
  });
}

}  // namespace
}  // namespace eventide_test

#endif
