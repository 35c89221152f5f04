// Collectives and the life of the process: each test needs a process of its own (one init()
// per process, fork()), so ctest runs each one alone under `mpirun -np 2`
// (tests/cpp/CMakeLists.txt). CPU tensors (MPI).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "eventide/eventide.hpp"

namespace ev = eventide;
namespace dist = eventide::distributed;
using namespace std::chrono_literals;

namespace {

dist::Communicator comm() {
  dist::InitOptions options;
  options.device = ev::Device::cpu();
  return dist::init(options);
}

ev::Tensor ones() { return ev::ones({4}, ev::DType::f32, ev::Device::cpu()); }

// waitpid with a deadline; kills the child if it has not exited by then. The status, or -1.
int reap(pid_t pid, std::chrono::seconds limit) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return status;
}

}  // namespace

// init()'s barrier runs on a stream of its own: a current stream held back, or broken by
// unrelated work, neither holds init up nor fails it (and a failed init would leave no
// communicator behind).
TEST(DistributedProcessTest, InitIsNotHeldUpOrFailedByTheCallersCurrentStream) {
  ev::Stream broken(ev::Device::cpu());
  ev::UserEvent bad;
  broken.wait(bad);
  bad.fail(std::make_exception_ptr(std::runtime_error("unrelated earlier failure")));
  std::optional<dist::Communicator> c;
  {
    ev::StreamGuard guard(broken);
    c = comm();
    EXPECT_TRUE(dist::is_initialized());
    EXPECT_GE(c->size(), 2);
  }
  ev::Stream held(ev::Device::cpu());
  ev::UserEvent gate;
  held.wait(gate);
  {
    ev::StreamGuard guard(held);
    EXPECT_TRUE(comm() == *c) << "a later init() returns the same communicator, at once";
  }
  gate.set();
  EXPECT_TRUE(c->barrier().wait_for(30s));
}

// A fork()ed child that exits normally runs the exit hook, finalize(): it must leave the
// parent's MPI alone (MPI_Finalize in the child waits for the job forever).
TEST(DistributedProcessTest, AForkedChildsExitLeavesTheParentsMpiAlone) {
  dist::Communicator c = comm();
  ASSERT_TRUE(c.all_reduce(ones()).wait_for(30s));
  if (c.rank() == 0) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Collectives are refused by name in the child; then a normal exit (atexit hooks run).
      try {
        (void)c.all_reduce(ones());
        std::_Exit(3);
      } catch (const ev::StateError& e) {
        if (std::string(e.what()).find("fork") == std::string::npos) std::_Exit(4);
      }
      std::exit(0);
    }
    ASSERT_GT(pid, 0);
    const int status = reap(pid, 20s);
    EXPECT_NE(status, -1) << "the forked child did not exit within 20 s (its exit hook ended the parent's MPI?)";
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  ev::Tensor t = c.all_reduce(ones());
  ASSERT_TRUE(t.wait_for(30s)) << "the parent's collective after the child's exit did not finish";
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 2.0f);
}

// Work queued before a fork() runs in the child too (the CPU pool starts over there): a
// collective among it fails there instead of calling the parent's MPI a second time.
TEST(DistributedProcessTest, ACollectiveQueuedBeforeForkFailsInTheChild) {
  dist::Communicator c = comm();
  ASSERT_TRUE(c.all_reduce(ones()).wait_for(30s));
  ev::UserEvent gate;
  ev::Stream s(ev::Device::cpu());
  s.wait(gate);
  ev::Tensor out;
  {
    ev::StreamGuard guard(s);
    out = c.all_reduce(ev::full({4}, c.rank() + 1.0, ev::DType::f32, ev::Device::cpu()));
  }
  pid_t pid = -1;
  if (c.rank() == 0) {
    pid = ::fork();
    if (pid == 0) {
      gate.set();
      ev::Event done;
      done.record(out);
      bool finished = false;
      try {
        finished = done.wait_for(10s);
      } catch (const std::exception&) {
        std::_Exit(0);  // failed in the child, as it must
      }
      std::_Exit(finished ? 3 : 4);  // 3: it ran MPI in the child; 4: it hangs there
    }
    ASSERT_GT(pid, 0);
  }
  gate.set();
  ASSERT_TRUE(out.wait_for(30s)) << "rank " << c.rank() << ": the collective did not finish";
  for (float v : out.to_vector<float>()) EXPECT_EQ(v, 3.0f) << "rank " << c.rank();
  if (pid > 0) {
    const int status = reap(pid, 20s);
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child's copy of the collective ran (3) or hung (4): status " << status;
  }
}
