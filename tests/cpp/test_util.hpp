// Helpers shared by eventide's C++ tests.
//
// * run_with_deadline(body): every test that can block (wait, synchronize, to_vector, join)
//   runs its body under it. The body runs on a fresh thread; if it has not returned by the
//   deadline, the helper prints which test hung and aborts, so a lost wake-up fails the test
//   run instead of hanging it until ctest's own timeout (which would not say where).
// * for_thread_counts(body): the same body at 1, 2, 3, 7 and 16 threads (Taskflow style).
// * run_threads(n, fn): starts n threads running fn(i) and joins them.
// * iterations(n): n in normal builds, n / 3 (at least 200) under a sanitizer, so that the
//   suite stays within its time budget under ThreadSanitizer.
// * gated_stream(): a stream whose later work is held back by a UserEvent, to make events
//   pending for as long as a test needs, without timing assumptions.
// * call_within(timeout, fn): runs a call that may deadlock (a known bug) on a detached
//   thread, so that the test fails with a message instead of aborting the whole binary.
// * wait_for_count / SharedCount: count callbacks without touching a finished test's stack.
// * EXPECT_THROW_MSG(stmt, Type, "part", ...): the exception class and what the message names.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <eventide/eventide.hpp>

#if defined(__SANITIZE_THREAD__)
#define EVENTIDE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EVENTIDE_TEST_TSAN 1
#endif
#endif
#ifndef EVENTIDE_TEST_TSAN
#define EVENTIDE_TEST_TSAN 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EVENTIDE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EVENTIDE_TEST_ASAN 1
#endif
#endif
#ifndef EVENTIDE_TEST_ASAN
#define EVENTIDE_TEST_ASAN 0
#endif

namespace eventide_test {

namespace ev = eventide;
using namespace std::chrono_literals;

inline constexpr bool kSanitized = EVENTIDE_TEST_TSAN || EVENTIDE_TEST_ASAN;
inline constexpr bool kTsan = EVENTIDE_TEST_TSAN;

// How many iterations a loop runs: `n` normally, a third (at least 200) under a sanitizer.
inline int iterations(int n) {
  if (!kSanitized) return n;
  int scaled = n / 3;
  return scaled < 200 ? (n < 200 ? n : 200) : scaled;
}

// The default deadline of a test body: far above what any test needs, below ctest's 120 s.
inline std::chrono::seconds default_deadline() { return kSanitized ? 100s : 60s; }

inline std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return "<no test>";
  return std::string(info->test_suite_name()) + "." + info->name();
}

// Runs `body` on its own thread and waits for it up to `deadline`. On time-out: prints the
// test's name and aborts (a hang is a failure, never a stuck CI job). An exception from the
// body is rethrown here, so gtest reports it as a failure of the test.
template <class F>
void run_with_deadline(F&& body, std::chrono::nanoseconds deadline = default_deadline()) {
  std::packaged_task<void()> task(std::forward<F>(body));
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(deadline) != std::future_status::ready) {
    std::fprintf(stderr,
                 "\n*** %s: the test body did not finish within %.0f s: a hang (lost wake-up "
                 "or deadlock?). Aborting.\n",
                 current_test_name().c_str(),
                 std::chrono::duration<double>(deadline).count());
    std::fflush(stderr);
    std::abort();
  }
  runner.join();
  done.get();
}

// Starts `n` threads running fn(i), i in [0, n), and joins them. Call it inside
// run_with_deadline: a thread that hangs then fails the test.
template <class F>
void run_threads(int n, F&& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

inline constexpr int kThreadCounts[] = {1, 2, 3, 7, 16};

// Runs body(n) for n = 1, 2, 3, 7, 16, each under its own deadline.
template <class F>
void for_thread_counts(F&& body) {
  for (int n : kThreadCounts) {
    SCOPED_TRACE("threads = " + std::to_string(n));
    run_with_deadline([&] { body(n); });
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A barrier for tests (std::barrier would do, but this one also counts generations).
class Latch {
 public:
  explicit Latch(int count) : count_(count) {}
  void count_down() {
    std::lock_guard lock(mu_);
    if (--count_ <= 0) cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return count_ <= 0; });
  }
  void arrive_and_wait() {
    count_down();
    wait();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
};

// A flag one thread sets and others wait for, with a timeout (for callback tests).
class Flag {
 public:
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait_for(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }
  bool is_set() {
    std::lock_guard lock(mu_);
    return set_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// Waits (polling) until `count` reaches `want`, up to `timeout`; false if it did not. For
// callback counts: an event's callbacks are handed to the callback thread by whichever thread
// saw it finish, possibly just after wait() has returned elsewhere, so a test that counts
// callbacks waits for the count instead of assuming they have all run.
inline bool wait_for_count(const std::atomic<int>& count, int want,
                           std::chrono::nanoseconds timeout = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (count.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Polls until `done()`, up to `timeout`: whether it became true. For what only a poll moves
// on (a tensor's ready(), which a poll loop must see become true).
template <class F>
bool poll_until(F&& done, std::chrono::nanoseconds timeout = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A counter callbacks hold by shared_ptr, so that a late (or extra) call never touches the
// stack of a test that has already returned.
using SharedCount = std::shared_ptr<std::atomic<int>>;
inline SharedCount make_count() { return std::make_shared<std::atomic<int>>(0); }

// A new CPU stream whose work enqueued from now on waits for `gate` (a UserEvent): ops on it
// stay pending until the test calls gate.set() (or fail()).
inline ev::Stream gated_stream(const ev::UserEvent& gate, ev::Device device = ev::Device::cpu()) {
  ev::Stream s(device);
  s.wait(gate);
  return s;
}

// A tensor whose producer runs on `stream` and sleeps `duration` before writing `value`.
inline ev::Tensor slow_tensor(ev::Stream& stream, std::chrono::milliseconds duration,
                              float value = 1.0f, ev::Shape shape = {4}) {
  ev::Tensor t = ev::empty(std::move(shape), ev::DType::f32, stream.device());
  stream.enqueue(
      "slow_fill",
      [t, duration, value] {
        std::this_thread::sleep_for(duration);
        float* p = t.data<float>();
        for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = value;
      },
      {}, {t});
  return t;
}

// Runs fn and returns the exception it threw, if any, as an exception_ptr.
template <class F>
std::exception_ptr capture(F&& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// what() of an exception_ptr.
inline std::string what(const std::exception_ptr& e) {
  if (!e) return "<no exception>";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "<not a std::exception>";
  }
}

// Runs `fn` on a detached thread and waits up to `timeout` for it to return or throw.
// Returns what it threw (null if it returned), or nullopt if it had not finished by then: a
// call that deadlocks is left blocked on its own thread (leaked on purpose) so that the test
// fails with a message instead of hanging. Capture handles by value: the thread may outlive
// the test.
template <class F>
std::optional<std::exception_ptr> call_within(std::chrono::nanoseconds timeout, F fn) {
  struct Result {
    Flag done;
    std::exception_ptr error;
  };
  auto result = std::make_shared<Result>();
  std::thread([result, fn = std::move(fn)]() mutable {
    try {
      fn();
    } catch (...) {
      result->error = std::current_exception();
    }
    result->done.set();
  }).detach();
  if (!result->done.wait_for(timeout)) return std::nullopt;
  return result->error;
}

// Whether `e` holds an exception of type E.
template <class E>
bool holds(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The cause() of an OpError held by `e` (null if `e` is not an OpError).
inline std::exception_ptr op_cause(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ev::OpError& x) {
    return x.cause();
  } catch (...) {
    return nullptr;
  }
}

// Expects `stmt` to throw `type` whose what() contains every string in `parts`.
#define EXPECT_THROW_MSG(stmt, type, ...)                                                   \
  do {                                                                                      \
    bool eventide_caught_ = false;                                                          \
    try {                                                                                   \
      stmt;                                                                                 \
    } catch (const type& eventide_e_) {                                                     \
      eventide_caught_ = true;                                                              \
      const std::string eventide_msg_ = eventide_e_.what();                                 \
      for (const char* eventide_part_ : std::initializer_list<const char*>{__VA_ARGS__}) {  \
        EXPECT_NE(eventide_msg_.find(eventide_part_), std::string::npos)                    \
            << "message of " #type " from `" #stmt "` does not mention \"" << eventide_part_ \
            << "\": " << eventide_msg_;                                                     \
      }                                                                                     \
    } catch (const std::exception& eventide_e_) {                                           \
      ADD_FAILURE() << "`" #stmt "` threw the wrong type (expected " #type "): "            \
                    << eventide_e_.what();                                                  \
    } catch (...) {                                                                         \
      ADD_FAILURE() << "`" #stmt "` threw a non-std exception (expected " #type ")";        \
    }                                                                                       \
    if (!eventide_caught_) ADD_FAILURE() << "`" #stmt "` did not throw " #type;            \
  } while (0)

// A user exception type, to check that the user's own type reaches waiters.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace eventide_test
