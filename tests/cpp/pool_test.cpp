// The CPU backend's threads: a bounded pool whatever the number of streams, streams that wait
// hold no thread, idle threads exit, bodies that wait for other work do not deadlock it, a
// busy stream does not starve the others; and fork(), in the child and in the parent.
//
// Each test runs in its own process (ctest runs them one by one), so a test may set
// EVENTIDE_CPU_THREADS before the runtime starts.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "child_process.hpp"
#include "test_util.hpp"

namespace eventide_test {
namespace {

// The eventide CPU threads alive now (by their name, as the OS lists them).
int cpu_threads() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "eventide-cpu") ++n;
  }
  closedir(dir);
  return n;
}

int default_bound() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 2; }

// Polls `pred` until true or `timeout`.
template <class P>
bool eventually(P&& pred, std::chrono::nanoseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(PoolTest, TenThousandStreamsGatedOnOneUserEventHoldABoundedNumberOfThreads) {
  run_with_deadline([] {
    const int n = kSanitized ? 2000 : 10000;
    ev::UserEvent gate(ev::Device::cpu());
    std::atomic<int> ran{0};
    std::vector<ev::Event> done;
    {
      std::vector<ev::Stream> streams;
      for (int i = 0; i < n; ++i) {
        streams.emplace_back(ev::Device::cpu());
        streams.back().wait(gate);
        done.push_back(streams.back().enqueue("count", [&ran] { ran.fetch_add(1); }));
      }
      // Every stream waits: none holds a thread.
      EXPECT_LE(cpu_threads(), default_bound());
      EXPECT_EQ(ran.load(), 0);
    }  // the handles go; the pool keeps the streams with queued work
    gate.set();
    ASSERT_TRUE(ev::wait_all_for(done, 60s));
    EXPECT_EQ(ran.load(), n);
    EXPECT_LE(cpu_threads(), default_bound());
  });
}

TEST(PoolTest, IdleThreadsExitAllButOne) {
  run_with_deadline([] {
    // Streams whose bodies overlap: the pool starts several threads.
    std::vector<ev::Stream> streams;
    std::vector<ev::Event> done;
    for (int i = 0; i < 4; ++i) {
      streams.emplace_back(ev::Device::cpu());
      done.push_back(streams.back().enqueue("sleep", [] { std::this_thread::sleep_for(100ms); }));
    }
    ev::wait_all(done);
    EXPECT_GE(cpu_threads(), 2);
    // Idle for two seconds, they exit; one stays for the next submission.
    EXPECT_TRUE(eventually([] { return cpu_threads() == 1; }, 20s)) << cpu_threads() << " threads";
    auto e = streams[0].enqueue("again", [] {});
    EXPECT_TRUE(e.wait_for(30s));
  });
}

TEST(PoolTest, BodiesWaitingForWorkOfOtherStreamsDoNotDeadlockASmallPool) {
  setenv("EVENTIDE_CPU_THREADS", "2", 1);
  run_with_deadline([] {
    // A chain: body i waits for body i+1's event. All become ready together, so both threads
    // of the pool start bodies that wait for work that has no thread yet.
    constexpr int kStreams = 16;
    ev::UserEvent gate(ev::Device::cpu());
    std::vector<ev::Stream> streams;
    for (int i = 0; i < kStreams; ++i) streams.emplace_back(ev::Device::cpu());
    std::vector<ev::Event> done(kStreams);
    std::atomic<int> order{0};
    std::vector<int> finished_at(kStreams, -1);
    for (int i = kStreams - 1; i >= 0; --i) {
      streams[i].wait(gate);
      ev::Event next = i + 1 < kStreams ? done[i + 1] : ev::Event();
      done[i] = streams[i].enqueue("chain", [next, &order, &finished_at, i] {
        if (next.status() != ev::EventStatus::empty) next.wait();
        finished_at[i] = order.fetch_add(1);
      });
    }
    gate.set();
    ASSERT_TRUE(done[0].wait_for(30s));
    for (int i = 0; i + 1 < kStreams; ++i) EXPECT_GT(finished_at[i], finished_at[i + 1]);
  });
}

TEST(PoolTest, AStreamWithMuchWorkDoesNotStarveAnotherOnAOneThreadPool) {
  setenv("EVENTIDE_CPU_THREADS", "1", 1);
  run_with_deadline([] {
    ev::Stream busy(ev::Device::cpu());
    ev::Stream other(ev::Device::cpu());
    ev::UserEvent gate(ev::Device::cpu());
    busy.wait(gate);
    ev::Event last;
    for (int i = 0; i < 3000; ++i) {
      last = busy.enqueue("spin", [] {
        const auto end = std::chrono::steady_clock::now() + 100us;
        while (std::chrono::steady_clock::now() < end) {
        }
      });
    }
    gate.set();
    std::this_thread::sleep_for(5ms);
    auto quick = other.enqueue("quick", [] {});
    ASSERT_TRUE(quick.wait_for(30s));
    // The busy stream's 300 ms of work is far from done: the other got the thread between
    // its ops, after a time slice.
    EXPECT_FALSE(last.query());
    EXPECT_TRUE(last.wait_for(60s));
  });
}

TEST(PoolTest, AForkedChildRunsTheWorkQueuedBeforeTheForkAndNewWork) {
  if (kTsan) GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::UserEvent gate(ev::Device::cpu());
    auto t = ev::full({4}, 1.0, ev::DType::f32, ev::Device::cpu());
    t.wait();
    s.wait(gate);
    std::atomic<int> ran{0};
    auto queued = s.enqueue("add", [&ran] { ran.fetch_add(1); });
    const pid_t pid = fork();
    ASSERT_NE(pid, -1);
    if (pid == 0) {
      int code = 0;
      try {
        gate.set();
        if (!queued.wait_for(10s)) code = 10;
        else if (ran.load() != 1) code = 11;
        ev::Stream fresh(ev::Device::cpu());
        auto e = fresh.enqueue("new", [&ran] { ran.fetch_add(10); });
        if (!e.wait_for(10s)) code = 12;
        else if (ran.load() != 11) code = 13;
        auto sum = ev::add(t, t);
        if (sum.to_vector<float>() != std::vector<float>{2, 2, 2, 2}) code = 14;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        code = 20;
      }
      _exit(code);
    }
    EXPECT_EQ(wait_child(pid, 60s), 0);
    // The parent's copy of the work is its own: still held back by the gate here.
    EXPECT_FALSE(queued.query());
    gate.set();
    EXPECT_TRUE(queued.wait_for(30s));
    EXPECT_EQ(ran.load(), 1);
  });
}

TEST(PoolTest, ForkWaitsForARunningOpToFinishFirst) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    std::atomic<bool> started{false};
    auto op = s.enqueue("sleep", [&started] {
      started = true;
      std::this_thread::sleep_for(300ms);
    });
    while (!started) std::this_thread::yield();
    const pid_t pid = fork();
    ASSERT_NE(pid, -1);
    if (pid == 0) {
      // The fork waited for the body: the child finds it finished, without error.
      _exit(op.query() && op.error() == nullptr ? 0 : 1);
    }
    EXPECT_TRUE(op.query());
    EXPECT_EQ(wait_child(pid, 60s), 0);
  });
}

TEST(PoolTest, AnOpStillRunningAfterTheForksGraceFailsInTheChildOnly) {
  if (kTsan) GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    std::atomic<bool> started{false};
    auto op = s.enqueue("long", [&started] {
      started = true;
      std::this_thread::sleep_for(4s);
    });
    auto after = s.enqueue("after", [] {});
    while (!started) std::this_thread::yield();
    const auto before_fork = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    ASSERT_NE(pid, -1);
    if (pid == 0) {
      int code = 0;
      try {
        op.wait();
        code = 1;  // it cannot have finished in the child
      } catch (const ev::Error& e) {
        if (std::string(e.what()).find("interrupted by fork") == std::string::npos) code = 2;
      }
      // The work behind it runs in the child, and fails with it (same stream, in order: it
      // depends on nothing, so it runs).
      if (!after.wait_for(10s)) code = 3;
      _exit(code);
    }
    // The fork waited its grace period (2 s), not the whole op.
    EXPECT_LT(std::chrono::steady_clock::now() - before_fork, 3500ms);
    EXPECT_EQ(wait_child(pid, 60s), 0);
    op.wait();  // the parent's own finishes normally
    EXPECT_EQ(op.error(), nullptr);
  });
}

}  // namespace
}  // namespace eventide_test
